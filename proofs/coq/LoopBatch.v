(* LoopBatch.v -- batch rows in the loop theorem (issue 61, item 3: "batch rows").

   Map to the rows of proofs/README.md:
   - V1 + V5 (batch) : batch_row_loop        (row b of the batched loop emits what one row's
                                              truncated loop LoopTrunc.loop_trunc emits with
                                              any single-row drafter that proposes row b's
                                              trees and whose state tracks the batch's)
                       batch_done_row        (a done row is left unchanged by every later round)
                       batch_row_sim         (any batched drafter -- its trees may depend on every
                                              row's state and text -- : row b is loop_trunc with
                                              the drafter that simulates the whole batch)
                       batch_row_independent (a drafter whose rows do not interact, one single-row
                                              drafter per row: row b is exactly its own
                                              single-row loop)
                       batch_loop_lossless   (any batched drafter laying trees out parents
                                              first: every active row emits the greedy decode of
                                              its own text, cut at its m tokens and through its
                                              first EOS, given m <= R rounds)

   Model: decode.speculative_round over a LoopState of rows b (any nat; the code's B rows are
   b < B, rows never read each other's cache). Per row: the target's cache (its own row of
   the KVCache), the committed text ctx (the cache's content), the root, count (tokens so far),
   done, out (the tokens written so far, as a list: the code's out[b, :count]). The drafter is
   one state machine for the whole batch (the code's draft_state pytree): bpropose gives row
   b's tree from the state, every row's text and the active mask; bobserve gets the state,
   the texts, the active mask, every row's tree, path_slots (untruncated, as the code passes
   them in Verified.result), keep (num_kept) and every row's layer outputs at every slot.
   A round, per row (the code's vectorised lines, decode.py speculative_round):
     T = the row's tree; one verify forward of [root, T] over the row's cache (TreeAttention.tx,
     exact ancestor mask); P = the slot walk (depth <= D); e = emitted;
     keep k = 0 if done, else eos_count eos (firstn (mx - count) e)   (= min(num_accepted + 1,
       mx - count) cut through the first EOS: count_through_first_eos);
     cache: commit of the first k path slots (unchanged if done); ctx grows by the root and the
     k - 1 kept accepted tokens; root' = e[k - 1] (unchanged if done); count' = count + k;
     done' = done || an EOS among the kept tokens || mx <= count';  out' = out ++ e[0..k-1].
   mx is max_new_tokens; the code's "eos_at.any" looks at the whole emission, but an EOS after
   the kept tokens implies k = mx - count, so done' is the same. The while loop's early stop
   (all rows done) is R rounds here: rounds over done rows change no row. *)

From Coq Require Import List Arith Lia Bool.
From Specjax Require Import GreedyWalk TreeAttention LoopSlots LoopTrunc.
Import ListNotations.

Record bstate (St K : Type) := mk_bstate {
  bst : St;
  bcache : nat -> cache K;
  bctx : nat -> list nat;
  broot : nat -> nat;
  bcount : nat -> nat;
  bdone : nat -> bool;
  bout : nat -> list nat
}.
Arguments mk_bstate {St K} _ _ _ _ _ _ _.
Arguments bst {St K} _.
Arguments bcache {St K} _ _.
Arguments bctx {St K} _ _.
Arguments broot {St K} _ _.
Arguments bcount {St K} _ _.
Arguments bdone {St K} _ _.
Arguments bout {St K} _ _.

(* Row b's committed text (ctx ++ [root]) and the active mask (~done). *)
Definition btext {St K} (s : bstate St K) (b : nat) : list nat := bctx s b ++ [broot s b].
Definition bactive {St K} (s : bstate St K) (b : nat) : bool := negb (bdone s b).

Record bdrafter (St X : Type) := mk_bdrafter {
  bpropose : St -> (nat -> list nat) -> (nat -> bool) -> nat -> dtree;
  bobserve : St -> (nat -> list nat) -> (nat -> bool) -> (nat -> dtree) -> (nat -> list nat)
             -> (nat -> nat) -> (nat -> nat -> nat -> X) -> St
}.
Arguments mk_bdrafter {St X} _ _.
Arguments bpropose {St X} _ _ _ _ _.
Arguments bobserve {St X} _ _ _ _ _ _ _ _.

(* One row's round pieces: LoopSlots' rpos, gout, gtg, gwalk, gemit, gcommit. *)

(* loop_trunc's round in these names. *)
Lemma loop_trunc_S : forall {St X K} (M : model X K) head L (dr : drafter St X) D eos st C ctx root m r,
  loop_trunc M head L dr D eos st C ctx root m (S r)
  = let T := propose dr st (ctx ++ [root]) in
    let P := gwalk M head L D C ctx root T in
    let e := gemit M head L D C ctx root T in
    let k := eos_count eos (firstn m e) in
    firstn k e ++ (if existsb eos (firstn k e) || (m <=? k) then []
                   else loop_trunc M head L dr D eos (observe dr st (ctx ++ [root]) T (path_slots P D)
                                                        (gout M C ctx root T))
                          (gcommit M D C ctx root T P k) (ctx ++ firstn k (map (slot_tok T root) P))
                          (last e root) (m - k) r).
Proof. reflexivity. Qed.

(* Row b's tree and pieces in the round from s. *)
Definition rtree {St X K} (dr : bdrafter St X) (s : bstate St K) (b : nat) : dtree :=
  bpropose dr (bst s) (btext s) (bactive s) b.

Definition rout {St X K} (M : model X K) (dr : bdrafter St X) (s : bstate St K) (b : nat) : nat -> nat -> X :=
  gout M (bcache s b) (bctx s b) (broot s b) (rtree dr s b).

Definition rwalk {St X K} (M : model X K) (head : X -> nat) (L D : nat) (dr : bdrafter St X) (s : bstate St K)
    (b : nat) : list nat :=
  gwalk M head L D (bcache s b) (bctx s b) (broot s b) (rtree dr s b).

Definition remit {St X K} (M : model X K) (head : X -> nat) (L D : nat) (dr : bdrafter St X) (s : bstate St K)
    (b : nat) : list nat :=
  gemit M head L D (bcache s b) (bctx s b) (broot s b) (rtree dr s b).

(* keep: 0 for a done row, else at most mx - count tokens, through the first EOS. *)
Definition rkeep {St X K} (M : model X K) (head : X -> nat) (L D : nat) (eos : nat -> bool) (mx : nat)
    (dr : bdrafter St X) (s : bstate St K) (b : nat) : nat :=
  if bdone s b then 0 else eos_count eos (firstn (mx - bcount s b) (remit M head L D dr s b)).

(* One round of decode.speculative_round over every row. *)
Definition bround {St X K} (M : model X K) (head : X -> nat) (L D : nat) (eos : nat -> bool) (mx : nat)
    (dr : bdrafter St X) (s : bstate St K) : bstate St K :=
  let T := rtree dr s in
  let P := rwalk M head L D dr s in
  let e := remit M head L D dr s in
  let k := rkeep M head L D eos mx dr s in
  mk_bstate
    (bobserve dr (bst s) (btext s) (bactive s) T (fun b => path_slots (P b) D) k (rout M dr s))
    (fun b => if bdone s b then bcache s b
              else gcommit M D (bcache s b) (bctx s b) (broot s b) (T b) (P b) (k b))
    (fun b => if bdone s b then bctx s b else bctx s b ++ firstn (k b) (map (slot_tok (T b) (broot s b)) (P b)))
    (fun b => if bdone s b then broot s b else nth (pred (k b)) (e b) (broot s b))
    (fun b => bcount s b + k b)
    (fun b => bdone s b || existsb eos (firstn (k b) (e b)) || (mx <=? bcount s b + k b))
    (fun b => bout s b ++ firstn (k b) (e b)).

Fixpoint bloop {St X K} (M : model X K) (head : X -> nat) (L D : nat) (eos : nat -> bool) (mx : nat)
    (dr : bdrafter St X) (R : nat) (s : bstate St K) : bstate St K :=
  match R with
  | O => s
  | S r => bloop M head L D eos mx dr r (bround M head L D eos mx dr s)
  end.

(* ---------- lemmas ---------- *)

(* A done row is left unchanged by every later round (the code's `jnp.where(active, ...)`). *)
Theorem batch_done_row : forall {St X K} (M : model X K) head L D eos mx (dr : bdrafter St X) b R s,
  bdone s b = true ->
  bout (bloop M head L D eos mx dr R s) b = bout s b
  /\ bcache (bloop M head L D eos mx dr R s) b = bcache s b
  /\ bctx (bloop M head L D eos mx dr R s) b = bctx s b
  /\ broot (bloop M head L D eos mx dr R s) b = broot s b
  /\ bdone (bloop M head L D eos mx dr R s) b = true.
Proof.
  intros St X K M head L D eos mx dr b R. induction R as [|r IH]; intros s Hd; [simpl; auto|].
  cbn [bloop].
  assert (Hd' : bdone (bround M head L D eos mx dr s) b = true) by (unfold bround; cbn; rewrite Hd; reflexivity).
  destruct (IH _ Hd') as (H1 & H2 & H3 & H4 & H5).
  rewrite H1, H2, H3, H4. unfold bround, rkeep; cbn. rewrite Hd. simpl. rewrite app_nil_r. auto.
Qed.

Lemma leb_sub : forall mx c k, (mx - c <=? k) = (mx <=? c + k).
Proof.
  intros mx c k. destruct (Nat.leb_spec (mx - c) k); destruct (Nat.leb_spec mx (c + k)); auto; lia.
Qed.

(* A round that does not end the row kept its whole emission. *)
Lemma keep_whole : forall eos m e,
  existsb eos (firstn (eos_count eos (firstn m e)) e) || (m <=? eos_count eos (firstn m e)) = false ->
  eos_count eos (firstn m e) = length e.
Proof.
  intros eos m e Hc. apply orb_false_iff in Hc as [He Hm]. apply Nat.leb_gt in Hm.
  pose proof (eos_count_le eos (firstn m e)) as Hle. rewrite firstn_length in Hle.
  assert (Hf : firstn (eos_count eos (firstn m e)) (firstn m e) = firstn (eos_count eos (firstn m e)) e).
  { rewrite firstn_firstn. f_equal. lia. }
  rewrite <- Hf in He. apply eos_count_none in He. rewrite firstn_length in He. lia.
Qed.

Lemma nth_pred_last : forall (e : list nat) d, e <> [] -> nth (pred (length e)) e d = last e d.
Proof.
  intros e d He. destruct (exists_last He) as (e' & x & ->).
  rewrite last_last, app_length. simpl. rewrite Nat.add_1_r. simpl.
  rewrite app_nth2 by lia. rewrite Nat.sub_diag. reflexivity.
Qed.

(* ---------- the batched loop is the single-row loop, row by row ---------- *)

(* Row b of the batched loop is LoopTrunc.loop_trunc run with a single-row drafter dr1 whose
   state pi s tracks the batch: it proposes row b's tree and, after a round, is in the state
   pi of the batch's next state. (The code's observe sees the kept round; loop_trunc's the
   untruncated one: they differ only in the round that ends the row.) *)
Theorem batch_row_loop : forall {St St1 X K} (M : model X K) head L D eos mx (dr : bdrafter St X)
    (dr1 : drafter St1 X) (pi : bstate St K -> St1) b,
  (forall s, bdone s b = false -> propose dr1 (pi s) (bctx s b ++ [broot s b]) = rtree dr s b) ->
  (forall s, bdone s b = false ->
     observe dr1 (pi s) (bctx s b ++ [broot s b]) (rtree dr s b) (path_slots (rwalk M head L D dr s b) D)
       (rout M dr s b)
     = pi (bround M head L D eos mx dr s)) ->
  forall R s, bdone s b = false ->
  bout (bloop M head L D eos mx dr R s) b
  = bout s b ++ loop_trunc M head L dr1 D eos (pi s) (bcache s b) (bctx s b) (broot s b) (mx - bcount s b) R.
Proof.
  intros St St1 X K M head L D eos mx dr dr1 pi b Hprop Hobs R.
  induction R as [|r IH]; intros s Hd.
  { simpl. rewrite app_nil_r. reflexivity. }
  cbn [bloop]. rewrite loop_trunc_S. cbv zeta. rewrite (Hprop s Hd).
  fold (rwalk M head L D dr s b) (rout M dr s b) (remit M head L D dr s b).
  rewrite (Hobs s Hd).
  set (s' := bround M head L D eos mx dr s).
  assert (Hk : rkeep M head L D eos mx dr s b = eos_count eos (firstn (mx - bcount s b) (remit M head L D dr s b)))
    by (unfold rkeep; rewrite Hd; reflexivity).
  assert (Hout : bout s' b = bout s b ++ firstn (rkeep M head L D eos mx dr s b) (remit M head L D dr s b))
    by reflexivity.
  assert (Hdone : bdone s' b = existsb eos (firstn (rkeep M head L D eos mx dr s b) (remit M head L D dr s b))
                                || (mx <=? bcount s b + rkeep M head L D eos mx dr s b))
    by (unfold s', bround; cbn [bdone]; rewrite Hd; reflexivity).
  rewrite Hk in Hout, Hdone.
  set (e := remit M head L D dr s b) in *.
  set (k := eos_count eos (firstn (mx - bcount s b) e)) in *.
  rewrite leb_sub.
  destruct (existsb eos (firstn k e) || (mx <=? bcount s b + k)) eqn:Hc.
  - destruct (batch_done_row M head L D eos mx dr b r s' Hdone) as (H1 & _).
    rewrite H1, Hout, app_nil_r. reflexivity.
  - rewrite (IH s' Hdone), Hout, <- app_assoc. f_equal. f_equal.
    rewrite <- leb_sub in Hc. pose proof (keep_whole eos _ e Hc) as Hke. fold k in Hke.
    assert (Hne : e <> []).
    { unfold e, remit, emitted. intro H. apply app_eq_nil in H as [_ H]. discriminate. }
    assert (Hroot : broot s' b = last e (broot s b)).
    { unfold s', bround. cbn [broot]. rewrite Hd. fold (rkeep M head L D eos mx dr s b). rewrite Hk.
      fold e. fold k. rewrite Hke. apply nth_pred_last. exact Hne. }
    assert (Hcount : mx - bcount s' b = mx - bcount s b - k).
    { unfold s', bround. cbn [bcount]. rewrite Hk. fold e k. lia. }
    rewrite Hroot, Hcount. unfold s', bround. cbn [bcache bctx]. rewrite Hd.
    fold (rkeep M head L D eos mx dr s b). rewrite Hk. fold e k. reflexivity.
Qed.

(* Any batched drafter: the single-row drafter whose state is the whole batch and whose
   observe runs the batch's round. *)
Definition sim_drafter {St X K} (M : model X K) head L D eos mx (dr : bdrafter St X) (b : nat)
  : drafter (bstate St K) X :=
  mk_drafter _ _ (fun s _ => rtree dr s b) (fun s _ _ _ _ => bround M head L D eos mx dr s).

Corollary batch_row_sim : forall {St X K} (M : model X K) head L D eos mx (dr : bdrafter St X) b R s,
  bdone s b = false ->
  bout (bloop M head L D eos mx dr R s) b
  = bout s b ++ loop_trunc M head L (sim_drafter M head L D eos mx dr b) D eos s
                  (bcache s b) (bctx s b) (broot s b) (mx - bcount s b) R.
Proof.
  intros. apply (batch_row_loop M head L D eos mx dr (sim_drafter M head L D eos mx dr b) (fun s => s) b);
    auto.
Qed.

(* A drafter whose rows do not interact: one single-row drafter per row, each row's state
   updated by its own drafter while the row is active. *)
Definition indep_bdrafter {St1 X} (drs : nat -> drafter St1 X) : bdrafter (nat -> St1) X :=
  mk_bdrafter (fun st txt _ b => propose (drs b) (st b) (txt b))
              (fun st txt act Ts ps _ outs b =>
                 if act b then observe (drs b) (st b) (txt b) (Ts b) (ps b) (outs b) else st b).

Corollary batch_row_independent : forall {St1 X K} (M : model X K) head L D eos mx (drs : nat -> drafter St1 X)
    b R (s : bstate (nat -> St1) K),
  bdone s b = false ->
  bout (bloop M head L D eos mx (indep_bdrafter drs) R s) b
  = bout s b ++ loop_trunc M head L (drs b) D eos (bst s b) (bcache s b) (bctx s b) (broot s b)
                  (mx - bcount s b) R.
Proof.
  intros St1 X K M head L D eos mx drs b R s Hd.
  apply (batch_row_loop M head L D eos mx (indep_bdrafter drs) (drs b) (fun s => bst s b) b); auto.
  intros s0 Hd0. unfold bround. cbn [bst]. unfold indep_bdrafter. cbn [bobserve].
  unfold bactive. rewrite Hd0. reflexivity.
Qed.

(* V1 + V5 per row of the batch: any batched drafter laying its trees out parents first;
   every active row whose cache holds its text and with m = mx - count <= R emits the greedy
   decode of its own text, m tokens cut through the first EOS -- whatever the other rows do. *)
Corollary batch_loop_lossless : forall {St X K} (M : model X K) (head : X -> nat) L D eos mx (dr : bdrafter St X),
  (forall st txt act b, dtree_ok (bpropose dr st txt act b)) ->
  let g := fun c => head (hid M L c) in
  forall R s b, bdone s b = false -> (forall l, bcache s b l = ents M l (bctx s b)) -> mx - bcount s b <= R ->
  bout (bloop M head L D eos mx dr R s) b
  = bout s b ++ cut eos (mx - bcount s b) (greedy g (bctx s b ++ [broot s b]) (mx - bcount s b)).
Proof.
  intros St X K M head L D eos mx dr Hok g R s b Hd HC HR.
  rewrite batch_row_sim by exact Hd. f_equal.
  apply (loop_trunc_lossless M head L (sim_drafter M head L D eos mx dr b) D eos); auto.
  intros st txt. apply Hok.
Qed.
