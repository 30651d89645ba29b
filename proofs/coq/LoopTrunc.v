(* LoopTrunc.v -- the greedy loop with EOS and max_new_tokens truncation (issue 61, item 3).

   Map to the rows of proofs/README.md:
   - V1 + V5 : cut_app              (what the code keeps of a round's emission, then of the rest)
               loop_trunc_cut       (the truncated loop emits the untruncated loop's stream cut
                                     at m tokens and through its first EOS)
               loop_trunc_lossless  (with at least m rounds: the greedy decode of m tokens, cut
                                     through its first EOS -- what generate_ar emits)

   Model: LoopSlots.loop (one row), with the code's keep rule (decode.speculative_round): of
   the emission e (accepted tokens and the bonus) a round keeps k = the first min(|e|, m)
   tokens, cut through the first EOS (`count_through_first_eos`), m the tokens the row may
   still emit; it commits the root and k - 1 accepted slots (commit of k path slots), and the
   row is done when a kept token is an EOS or k = m. The last kept token is the next root. The
   drafter's observe is given the untruncated round (the code hands it the kept one): they
   differ only in the round that ends the row, after which the state is not used. eos is any
   predicate on tokens (the code's table of EOS ids). One row here; the batch (rows advancing
   independently, done rows left unchanged) is LoopBatch.v, whose rows are this loop.
   The first token, picked after the prefill, is outside the loop here: m counts the tokens
   after it, and a first token that is an EOS ends the row before any round. *)

From Coq Require Import List Arith Lia Bool.
From Specjax Require Import GreedyWalk TreeAttention LoopSlots.
Import ListNotations.

(* count_through_first_eos: the length of the prefix of s through its first EOS (|s| if none). *)
Fixpoint eos_count (eos : nat -> bool) (s : list nat) : nat :=
  match s with
  | [] => 0
  | x :: s' => if eos x then 1 else S (eos_count eos s')
  end.

(* What the code keeps of a stream s with m tokens left: at most m, through the first EOS. *)
Definition cut (eos : nat -> bool) (m : nat) (s : list nat) : list nat := firstn (eos_count eos (firstn m s)) s.

Fixpoint loop_trunc {St X K} (M : model X K) (head : X -> nat) (L : nat) (dr : drafter St X) (D : nat)
    (eos : nat -> bool) (st : St) (C : cache K) (ctx : list nat) (root m R : nat) : list nat :=
  match R with
  | O => []
  | S r =>
      let T := propose dr st (ctx ++ [root]) in
      let P := gwalk M head L D C ctx root T in
      let e := gemit M head L D C ctx root T in
      let k := eos_count eos (firstn m e) in
      firstn k e ++ (if existsb eos (firstn k e) || (m <=? k) then []
                     else loop_trunc M head L dr D eos (observe dr st (ctx ++ [root]) T (path_slots P D)
                                                          (gout M C ctx root T))
                            (gcommit M D C ctx root T P k) (ctx ++ firstn k (map (slot_tok T root) P))
                            (last e root) (m - k) r)
  end.

Lemma eos_count_le : forall eos s, eos_count eos s <= length s.
Proof. intros eos s; induction s as [|x s IH]; simpl; [lia|]. destruct (eos x); simpl; lia. Qed.

Lemma eos_count_none : forall eos s, existsb eos (firstn (eos_count eos s) s) = false -> eos_count eos s = length s.
Proof.
  intros eos s; induction s as [|x s IH]; simpl; [reflexivity|].
  destruct (eos x) eqn:E; simpl; rewrite ?E; simpl; [discriminate|]. intro H. f_equal. apply IH. exact H.
Qed.

(* The keep rule on a round's emission e followed by the rest of the stream. *)
Lemma cut_app : forall eos e rest m,
  let k := eos_count eos (firstn m e) in
  cut eos m (e ++ rest) = firstn k e ++ (if existsb eos (firstn k e) || (m <=? k) then [] else cut eos (m - k) rest).
Proof.
  intros eos e; induction e as [|x e IH]; intros rest m k; subst k.
  - destruct m as [|m]; simpl; [reflexivity|]. reflexivity.
  - destruct m as [|m]; [reflexivity|]. unfold cut in *. cbn [firstn app eos_count].
    destruct (eos x) eqn:E; cbn [firstn existsb]; rewrite E; [reflexivity|]. cbn [orb app].
    rewrite (IH rest m). cbn [Nat.leb Nat.sub]. reflexivity.
Qed.

Lemma emitted_length : forall par tok valid ns tg D,
  length (emitted tok tg (slot_walk par tok valid ns tg D 0)) = length (slot_walk par tok valid ns tg D 0).
Proof.
  intros. unfold emitted. rewrite app_length, map_length.
  pose proof (slot_walk_hd par tok valid ns tg D 0) as HP.
  destruct (slot_walk par tok valid ns tg D 0) as [|s P]; [discriminate | simpl; lia].
Qed.

(* The truncated loop emits the untruncated stream, cut at m tokens and through its first EOS. *)
Theorem loop_trunc_cut : forall {St X K} (M : model X K) head L (dr : drafter St X) D eos R st C ctx root m,
  loop_trunc M head L dr D eos st C ctx root m R = cut eos m (loop M head L dr D st C ctx root R).
Proof.
  intros St X K M head L dr D eos R. induction R as [|r IH]; intros st C ctx root m.
  { unfold cut. destruct m; reflexivity. }
  cbn [loop_trunc loop]. unfold gemit, gwalk, gtg, gcommit, gout, rpos. cbv beta zeta.
  match goal with |- context [emitted ?tok ?tg ?P] => set (E := emitted tok tg P) end.
  match goal with |- context [loop M head L dr D ?a ?b ?c ?d r] => set (rest := loop M head L dr D a b c d r) end.
  rewrite (cut_app eos E rest m). cbv zeta.
  destruct (existsb eos (firstn (eos_count eos (firstn m E)) E) || (m <=? eos_count eos (firstn m E))) eqn:Hc;
    [reflexivity|].
  f_equal. apply orb_false_iff in Hc as [He Hm]. apply Nat.leb_gt in Hm.
  (* the round was kept whole: k = |e| = |P| *)
  assert (Hk : eos_count eos (firstn m E) = length E).
  { pose proof (eos_count_le eos (firstn m E)) as Hle. rewrite firstn_length in Hle.
    assert (Hf : firstn (eos_count eos (firstn m E)) (firstn m E) = firstn (eos_count eos (firstn m E)) E).
    { rewrite firstn_firstn. f_equal. lia. }
    rewrite <- Hf in He. apply eos_count_none in He. rewrite firstn_length in He. lia. }
  rewrite IH. subst rest. f_equal. rewrite Hk. subst E.
  rewrite emitted_length.
  match goal with |- context [slot_walk ?par ?tok ?valid ?ns ?tg D 0] =>
    set (P := slot_walk par tok valid ns tg D 0) end.
  assert (HP : P = 0 :: tl P) by apply slot_walk_hd.
  assert (Hn : length P = S (num_accepted P)) by (rewrite HP; reflexivity).
  rewrite firstn_all2 by (rewrite map_length; lia).
  unfold emitted. rewrite last_last. rewrite Hn. reflexivity.
Qed.

(* Only the first m tokens of a stream matter to cut. *)
Lemma cut_firstn : forall eos m s, cut eos m s = cut eos m (firstn m s).
Proof.
  intros eos m s. unfold cut.
  assert (Hmm : firstn m (firstn m s) = firstn m s) by (rewrite firstn_firstn, Nat.min_id; reflexivity).
  rewrite Hmm. pose proof (eos_count_le eos (firstn m s)) as H. rewrite firstn_length in H.
  rewrite firstn_firstn, Nat.min_l by lia. reflexivity.
Qed.

(* V1 with EOS and max_new_tokens: from a prefilled cache, m <= R rounds' worth of tokens left,
   the row emits exactly the greedy decode of m tokens cut through its first EOS. *)
Theorem loop_trunc_lossless : forall {St X K} (M : model X K) (head : X -> nat) L (dr : drafter St X) D eos,
  (forall st txt, dtree_ok (propose dr st txt)) ->
  let g := fun c => head (hid M L c) in
  forall R st C ctx root m, (forall l, C l = ents M l ctx) -> m <= R ->
  loop_trunc M head L dr D eos st C ctx root m R = cut eos m (greedy g (ctx ++ [root]) m).
Proof.
  intros St X K M head L dr D eos Hdr g R st C ctx root m HC Hm.
  rewrite loop_trunc_cut.
  destruct (loop_lossless_slots M head L dr D Hdr R st C ctx root HC) as [H1 H2].
  fold g in H1. rewrite cut_firstn, H1.
  rewrite (greedy_prefix g (ctx ++ [root]) m (length (loop M head L dr D st C ctx root R))) by lia.
  rewrite firstn_app, greedy_length, Nat.sub_diag, firstn_all2 by (rewrite greedy_length; lia).
  simpl. rewrite app_nil_r. reflexivity.
Qed.
