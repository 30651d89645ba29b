(* LoopSlots.v -- the greedy loop end to end at the slot level (V1 + V2, issue 50).

   Map to the rows of proofs/README.md:
   - V1  : slot_walk_greedy        (the slot walk -- specjax.verify.walk: from slot 0 follow the
                                    lowest-index valid child whose token is the target token,
                                    at most max_depth times -- emits the greedy rollout when the
                                    target token at every slot is g (text ++ path(slot)))
           slot_walk_root_path     (its path_slots are a root path: slot 0, then children)
           slot_walk_eq_path_walk  (it emits what GreedyWalk's walk emits on the list of root
                                    paths of the valid nodes, paths(parents, tokens, valid),
                                    when valid nodes have valid parents and no two valid
                                    siblings carry the same token)
           loop_round_exact        (one round of the loop over an abstract attention stack:
                                    tree_logits_exact gives the targets of slot_walk_greedy,
                                    commit_exact gives the cache of the committed text)
           loop_lossless_slots     (any number of rounds, any drafter with any state: the
                                    stream is exactly the greedy decode of the sequential model)

   Model. A draft tree is what specjax.tree.Tree holds for one row, node i in 0..n-1:
   parents1 i = Tree.parents[i] + 1 (the parent's slot: 0 = the root; specjax compares
   `tree.parents + 1 == slot` in children_mask), tokens i, valid i. Slot 0 is the root (the
   last committed token, not yet in the cache), slot i + 1 is node i, as in verify_tree's
   block [root, tree tokens]. match_child is tree.match_child (the lowest-index valid child
   of the slot carrying the token); slot_walk is verify.walk (path_slots root first, at most
   D = max_depth accepted nodes; padded with 0 to D + 1 entries, num_accepted = accepted
   count); the emission is the accepted tokens and the bonus, the target token at the last
   accepted slot; the commit is models.cache.commit of the first num_accepted + 1 path slots
   (TreeAttention.commit). The target is TreeAttention's abstract stack (no floats): the
   greedy token of a sequence c is g c = head (hid M L c), head any function of the last
   layer's output (argmax of the LM head: V6 for floats), and the verify forward is tx with
   positions len + depth and ancestor_mask (max_depth = None). The drafter is any state
   machine: its tree is any function of its state and the committed text, and its next state
   any function of the old state, the text, the tree, the path slots and every layer's output
   at every slot (so a table update from the target's top-k at every verified slot, rejected
   ones included, is covered). *)

From Coq Require Import List Arith Lia Bool.
From Specjax Require Import GreedyWalk TreeAttention.
Import ListNotations.

(* ---------- the slot walk ---------- *)

Definition is_child (par tok : nat -> nat) (valid : nat -> bool) (s t j : nat) : bool :=
  valid j && Nat.eqb (par j) s && Nat.eqb (tok j) t.

(* tree.match_child: the lowest-index valid child slot of s carrying t (slots 1..ns-1). *)
Definition match_child (par tok : nat -> nat) (valid : nat -> bool) (ns s t : nat) : option nat :=
  find (is_child par tok valid s t) (seq 1 (pred ns)).

(* verify.walk's path: the slots from s, following the target token tg at each slot. *)
Fixpoint slot_walk (par tok : nat -> nat) (valid : nat -> bool) (ns : nat) (tg : nat -> nat)
    (fuel s : nat) : list nat :=
  match fuel with
  | O => [s]
  | S f =>
      match match_child par tok valid ns s (tg s) with
      | Some c => s :: slot_walk par tok valid ns tg f c
      | None => [s]
      end
  end.

(* The tokens below the root on the root path to slot s. *)
Definition spath (tok par : nat -> nat) (s : nat) : list nat := map tok (tl (anc par s)).

Lemma match_child_some : forall par tok valid ns s t c,
  match_child par tok valid ns s t = Some c ->
  0 < c < ns /\ valid c = true /\ par c = s /\ tok c = t.
Proof.
  unfold match_child; intros par tok valid ns s t c H.
  destruct (find_some _ _ H) as [Hin Hp]. apply in_seq in Hin.
  unfold is_child in Hp. apply andb_true_iff in Hp as [Hp Ht]. apply andb_true_iff in Hp as [Hv Hpar].
  apply Nat.eqb_eq in Hpar. apply Nat.eqb_eq in Ht. repeat split; auto; lia.
Qed.

Lemma match_child_none : forall par tok valid ns s t,
  match_child par tok valid ns s t = None ->
  forall c, 0 < c < ns -> valid c = true -> par c = s -> tok c <> t.
Proof.
  unfold match_child; intros par tok valid ns s t H c Hc Hv Hp Ht.
  pose proof (find_none _ _ H c ltac:(apply in_seq; lia)) as Hf.
  unfold is_child in Hf. rewrite Hv, Hp, Ht, !Nat.eqb_refl in Hf. discriminate.
Qed.

Lemma anc_head : forall par n i, tree_ok par n -> i < n -> anc par i = 0 :: tl (anc par i).
Proof.
  intros par n i Hok; induction i as [i IH] using lt_wf_ind; intros Hi.
  destruct (Nat.eq_dec i 0) as [->|H0]; [reflexivity|].
  assert (Hp : par i < i) by (apply Hok; lia).
  rewrite (anc_S par n i Hok) by lia. rewrite (IH (par i) Hp) by lia. reflexivity.
Qed.

Lemma spath_child : forall tok par n c, tree_ok par n -> 0 < c < n ->
  spath tok par c = spath tok par (par c) ++ [tok c].
Proof.
  intros tok par n c Hok Hc. unfold spath.
  assert (Hp : par c < c) by (apply Hok; lia).
  rewrite (anc_S par n c Hok Hc), (anc_head par n (par c) Hok) by lia. simpl.
  rewrite map_app. reflexivity.
Qed.

Lemma path_tokens_spath : forall tok par n i, tree_ok par n -> i < n ->
  path_tokens tok par i = tok 0 :: spath tok par i.
Proof.
  intros tok par n i Hok Hi. unfold path_tokens, spath.
  rewrite (anc_head par n i Hok Hi) at 1. reflexivity.
Qed.

Lemma slot_walk_hd : forall par tok valid ns tg fuel s,
  slot_walk par tok valid ns tg fuel s = s :: tl (slot_walk par tok valid ns tg fuel s).
Proof.
  intros; destruct fuel; simpl; [reflexivity|].
  destruct (match_child _ _ _ _ _ _); reflexivity.
Qed.

(* The invariant of the walk: from a slot whose path is the greedy rollout of length m, the
   accepted tokens continue it, the last slot's path is the whole accepted path, and that
   slot is a slot of the block. *)
Lemma slot_walk_invariant : forall (g : list nat -> nat) txt par tok valid ns tg,
  tree_ok par ns -> (forall s, s < ns -> tg s = g (txt ++ spath tok par s)) ->
  forall fuel s m, s < ns -> spath tok par s = greedy g txt m ->
  let P := slot_walk par tok valid ns tg fuel s in
  spath tok par s ++ map tok (tl P) = greedy g txt (m + length (tl P))
  /\ spath tok par (last P 0) = spath tok par s ++ map tok (tl P)
  /\ last P 0 < ns
  /\ length (tl P) <= fuel.
Proof.
  intros g txt par tok valid ns tg Hok Htg.
  induction fuel as [|f IH]; intros s m Hs Hm P; subst P; simpl.
  - rewrite app_nil_r, Nat.add_0_r. repeat split; auto; lia.
  - destruct (match_child par tok valid ns s (tg s)) as [c|] eqn:E; simpl.
    + destruct (match_child_some _ _ _ _ _ _ _ E) as (Hc & Hv & Hpar & Htok).
      assert (Hm' : spath tok par c = greedy g txt (S m)).
      { rewrite (spath_child tok par ns c Hok Hc), Hpar, Htok, Htg by exact Hs.
        rewrite greedy_snoc, Hm. reflexivity. }
      destruct (IH c (S m) ltac:(lia) Hm') as (H1 & H2 & H3 & H4).
      pose proof (slot_walk_hd par tok valid ns tg f c) as HW.
      revert H1 H2 H3 H4 HW. generalize (slot_walk par tok valid ns tg f c) as W.
      intros W H1 H2 H3 H4 HW. rewrite HW in H1, H2, H3, H4 |- *. cbn [tl map length] in *.
      rewrite (spath_child tok par ns c Hok Hc), Hpar in H1, H2.
      rewrite <- app_assoc in H1, H2. cbn [app] in H1, H2.
      split; [|split; [|split]].
      * rewrite H1. f_equal. lia.
      * exact H2.
      * exact H3.
      * lia.
    + rewrite app_nil_r, Nat.add_0_r. repeat split; auto; lia.
Qed.

(* The emission of a round: the accepted tokens, then the bonus (the target token at the
   last accepted slot) -- WalkResult.emitted. *)
Definition emitted (tok : nat -> nat) (tg : nat -> nat) (P : list nat) : list nat :=
  map tok (tl P) ++ [tg (last P 0)].

(* V1 at the slot level: if the target token at every slot s is g (text ++ path(s)) --
   exact tree attention, derived below from tree_logits_exact -- the walk from slot 0 emits
   exactly the greedy rollout of the text, 1 to D + 1 tokens. No hypothesis on the tree
   beyond parents before children: duplicate siblings and invalid nodes included. *)
Theorem slot_walk_greedy : forall (g : list nat -> nat) txt par tok valid ns tg D,
  tree_ok par ns -> 0 < ns -> (forall s, s < ns -> tg s = g (txt ++ spath tok par s)) ->
  let e := emitted tok tg (slot_walk par tok valid ns tg D 0) in
  e = greedy g txt (length e) /\ 1 <= length e <= S D.
Proof.
  intros g txt par tok valid ns tg D Hok Hn Htg e.
  destruct (slot_walk_invariant g txt par tok valid ns tg Hok Htg D 0 0 Hn eq_refl)
    as (H1 & H2 & H3 & H4).
  simpl in H1, H2. unfold e, emitted.
  rewrite app_length, map_length. simpl. split; [|lia].
  rewrite Nat.add_1_r, greedy_snoc, H1, Htg, H2, H1 by exact H3. reflexivity.
Qed.

(* The path slots form a root path of the block (TreeAttention.root_path): what commit_exact
   asks of the committed slots. *)
Lemma slot_walk_root_path_from : forall par tok valid ns tg fuel s p,
  root_path par ns p -> last p 0 = s ->
  root_path par ns (p ++ tl (slot_walk par tok valid ns tg fuel s)).
Proof.
  intros par tok valid ns tg fuel; induction fuel as [|f IH]; intros s p Hp Hl; simpl.
  - rewrite app_nil_r; exact Hp.
  - destruct (match_child par tok valid ns s (tg s)) as [c|] eqn:E; simpl; [|rewrite app_nil_r; exact Hp].
    destruct (match_child_some _ _ _ _ _ _ _ E) as (Hc & _ & Hpar & _).
    rewrite (slot_walk_hd par tok valid ns tg f c). simpl.
    replace (p ++ c :: tl (slot_walk par tok valid ns tg f c))
      with ((p ++ [c]) ++ tl (slot_walk par tok valid ns tg f c)) by (rewrite <- app_assoc; reflexivity).
    apply IH; [apply rp_child; auto; rewrite Hl; exact Hpar | apply last_last].
Qed.

Theorem slot_walk_root_path : forall par tok valid ns tg D,
  root_path par ns (slot_walk par tok valid ns tg D 0).
Proof.
  intros. rewrite slot_walk_hd.
  exact (slot_walk_root_path_from par tok valid ns tg D 0 [0] (rp_root par ns) eq_refl).
Qed.

(* ---------- the slot walk is the path walk on paths(parents, tokens, valid) ---------- *)

(* The root paths of the valid slots, in slot order: the tree as GreedyWalk's list of paths. *)
Definition paths (par tok : nat -> nat) (valid : nat -> bool) (ns : nat) : tree :=
  map (spath tok par) (filter valid (seq 1 (pred ns))).

(* Valid nodes have the root or a valid node as parent. *)
Definition valid_closed (par : nat -> nat) (valid : nat -> bool) (ns : nat) : Prop :=
  forall c, 0 < c < ns -> valid c = true -> par c = 0 \/ valid (par c) = true.

(* No two valid siblings carry the same token. *)
Definition distinct_siblings (par tok : nat -> nat) (valid : nat -> bool) (ns : nat) : Prop :=
  forall c d, 0 < c < ns -> 0 < d < ns -> valid c = true -> valid d = true ->
  par c = par d -> tok c = tok d -> c = d.

Lemma spath_length : forall tok par n i, tree_ok par n -> i < n ->
  length (spath tok par i) = node_depth par i.
Proof.
  intros tok par n i Hok Hi. unfold spath, node_depth. rewrite map_length.
  rewrite (anc_head par n i Hok Hi). reflexivity.
Qed.

(* Under the two hypotheses, a path names at most one slot among the root and the valid nodes. *)
Lemma spath_injective : forall par tok valid ns,
  tree_ok par ns -> valid_closed par valid ns -> distinct_siblings par tok valid ns ->
  forall k i j, i < ns -> j < ns -> (i = 0 \/ valid i = true) -> (j = 0 \/ valid j = true) ->
  length (spath tok par i) = k -> spath tok par i = spath tok par j -> i = j.
Proof.
  intros par tok valid ns Hok Hcl Hds k; induction k as [|k IH]; intros i j Hi Hj Hvi Hvj Hk E.
  - assert (Hdj : length (spath tok par j) = 0) by (rewrite <- E; exact Hk).
    rewrite (spath_length tok par ns i Hok Hi) in Hk. rewrite (spath_length tok par ns j Hok Hj) in Hdj.
    destruct (Nat.eq_dec i 0) as [->|Hi0]; destruct (Nat.eq_dec j 0) as [->|Hj0]; auto; exfalso.
    + rewrite (depth_S par ns j Hok) in Hdj by lia. discriminate.
    + rewrite (depth_S par ns i Hok) in Hk by lia. discriminate.
    + rewrite (depth_S par ns i Hok) in Hk by lia. discriminate.
  - destruct (Nat.eq_dec i 0) as [->|Hi0].
    { rewrite (spath_length tok par ns 0 Hok Hi) in Hk. discriminate. }
    assert (Hj0 : j <> 0).
    { intros ->. rewrite E, (spath_length tok par ns 0 Hok Hj) in Hk. discriminate. }
    destruct Hvi as [|Hvi]; [lia|]. destruct Hvj as [|Hvj]; [lia|].
    rewrite (spath_child tok par ns i Hok), (spath_child tok par ns j Hok) in E by lia.
    apply app_inj_tail in E as [Ep Et].
    assert (Hpi : par i < i) by (apply Hok; lia). assert (Hpj : par j < j) by (apply Hok; lia).
    assert (Hpp : par i = par j).
    { apply IH; try lia.
      - destruct (Hcl i ltac:(lia) Hvi); auto.
      - destruct (Hcl j ltac:(lia) Hvj); auto.
      - rewrite (spath_child tok par ns i Hok), app_length in Hk by lia. simpl in Hk. lia.
      - exact Ep. }
    apply Hds; auto; lia.
Qed.

(* The step of the two walks: at a slot s that is the root or valid, a valid child of s
   carries t iff path(s) ++ [t] is listed in paths. *)
Lemma match_child_in_paths : forall par tok valid ns s t,
  tree_ok par ns -> valid_closed par valid ns -> distinct_siblings par tok valid ns ->
  s < ns -> (s = 0 \/ valid s = true) ->
  (exists c, match_child par tok valid ns s t = Some c) <->
  In (spath tok par s ++ [t]) (paths par tok valid ns).
Proof.
  intros par tok valid ns s t Hok Hcl Hds Hs Hvs. split.
  - intros [c E]. destruct (match_child_some _ _ _ _ _ _ _ E) as (Hc & Hv & Hp & Ht).
    unfold paths. apply in_map_iff. exists c. split.
    + rewrite (spath_child tok par ns c Hok Hc), Hp, Ht. reflexivity.
    + apply filter_In. split; [apply in_seq; lia | exact Hv].
  - intros Hin. unfold paths in Hin. apply in_map_iff in Hin as [c [Ec Hc]].
    apply filter_In in Hc as [Hc Hv]. apply in_seq in Hc.
    rewrite (spath_child tok par ns c Hok) in Ec by lia.
    apply app_inj_tail in Ec as [Ep Et].
    assert (Hpc : par c < c) by (apply Hok; lia).
    assert (Hps : par c = s).
    { apply (spath_injective par tok valid ns Hok Hcl Hds (length (spath tok par (par c))));
        auto; try lia. destruct (Hcl c ltac:(lia) Hv); auto. }
    destruct (match_child par tok valid ns s t) as [c'|] eqn:E; [exists c'; reflexivity|].
    exfalso. exact (match_child_none _ _ _ _ _ _ E c ltac:(lia) Hv Hps Et).
Qed.

Lemma slot_walk_accept : forall par tok valid ns tg txt (g : list nat -> nat),
  tree_ok par ns -> valid_closed par valid ns -> distinct_siblings par tok valid ns ->
  (forall s, s < ns -> tg s = g (txt ++ spath tok par s)) ->
  forall fuel s, s < ns -> (s = 0 \/ valid s = true) ->
  map tok (tl (slot_walk par tok valid ns tg fuel s))
  = accept g (paths par tok valid ns) txt (spath tok par s) fuel.
Proof.
  intros par tok valid ns tg txt g Hok Hcl Hds Htg.
  induction fuel as [|f IH]; intros s Hs Hvs; simpl; [reflexivity|].
  rewrite <- (Htg s Hs).
  destruct (match_child par tok valid ns s (tg s)) as [c|] eqn:E.
  - destruct (match_child_some _ _ _ _ _ _ _ E) as (Hc & Hv & Hp & Ht).
    destruct (in_dec path_eq_dec (spath tok par s ++ [tg s]) (paths par tok valid ns)) as [Hin|Hout].
    + rewrite slot_walk_hd. simpl. rewrite Ht. f_equal.
      rewrite <- Ht, <- Hp, <- (spath_child tok par ns c Hok Hc).
      apply IH; [lia | right; exact Hv].
    + exfalso. apply Hout. apply (match_child_in_paths par tok valid ns s (tg s)); auto. exists c; exact E.
  - destruct (in_dec path_eq_dec (spath tok par s ++ [tg s]) (paths par tok valid ns)) as [Hin|Hout];
      [|reflexivity].
    exfalso. apply (match_child_in_paths par tok valid ns s (tg s) Hok Hcl Hds Hs Hvs) in Hin.
    destruct Hin as [c Ec]. rewrite E in Ec. discriminate.
Qed.

(* V1: the slot walk emits what the path walk of GreedyWalk.v emits on paths(...), whenever
   valid nodes hang below the root or valid nodes and valid siblings carry distinct tokens.
   (With duplicate siblings the two differ -- the slot walk only enters the lowest-index
   copy, the path walk looks the path up in the list -- but both are the greedy rollout:
   slot_walk_greedy needs no such hypothesis.) *)
Theorem slot_walk_eq_path_walk : forall par tok valid ns tg txt (g : list nat -> nat) D,
  tree_ok par ns -> 0 < ns -> valid_closed par valid ns -> distinct_siblings par tok valid ns ->
  (forall s, s < ns -> tg s = g (txt ++ spath tok par s)) ->
  emitted tok tg (slot_walk par tok valid ns tg D 0) = walk g (paths par tok valid ns) txt D.
Proof.
  intros par tok valid ns tg txt g D Hok Hn Hcl Hds Htg.
  pose proof (slot_walk_accept par tok valid ns tg txt g Hok Hcl Hds Htg D 0 Hn (or_introl eq_refl)) as Ha.
  unfold emitted, walk. replace (spath tok par 0) with (@nil nat) in Ha by reflexivity.
  rewrite <- Ha. f_equal. f_equal.
  destruct (slot_walk_invariant g txt par tok valid ns tg Hok Htg D 0 0 Hn eq_refl) as (_ & H2 & H3 & _).
  rewrite Htg by exact H3. rewrite H2. reflexivity.
Qed.

(* ---------- the loop ---------- *)

(* One row of specjax.tree.Tree, nodes 0..n_nodes-1: parents1 i = parents[i] + 1. *)
Record dtree := mk_dtree {
  n_nodes : nat;
  parents1 : nat -> nat;
  tokens : nat -> nat;
  valid : nat -> bool
}.

(* The verify block [root, tree tokens]: slot 0 the root, slot i + 1 node i. *)
Definition slot_par (T : dtree) (s : nat) : nat := match s with O => O | S i => parents1 T i end.
Definition slot_tok (T : dtree) (root s : nat) : nat := match s with O => root | S i => tokens T i end.
Definition slot_valid (T : dtree) (s : nat) : bool := match s with O => false | S i => valid T i end.

(* Tree's layout invariant: every node's parent is the root or an earlier node
   (parents[i] < i). *)
Definition dtree_ok (T : dtree) : Prop := forall i, i < n_nodes T -> parents1 T i <= i.

Lemma dtree_tree_ok : forall T, dtree_ok T -> tree_ok (slot_par T) (S (n_nodes T)).
Proof. intros T H [|i] Hi; simpl; [lia|]. specialize (H i ltac:(lia)). lia. Qed.

(* verify.WalkResult.path_slots: D + 1 entries, the path then 0s; num_accepted. *)
Definition path_slots (P : list nat) (D : nat) : list nat := P ++ repeat 0 (S D - length P).
Definition num_accepted (P : list nat) : nat := pred (length P).

(* A drafter: a state machine. propose st text = the tree; observe st text tree path_slots
   out = the next state, where out l s is the layer-l output at slot s of the verify forward
   (every logit, top-k and feature the code hands the drafter is a function of it). *)
Record drafter (St X : Type) := mk_drafter {
  propose : St -> list nat -> dtree;
  observe : St -> list nat -> dtree -> list nat -> (nat -> nat -> X) -> St
}.
Arguments propose {St X} _ _ _.
Arguments observe {St X} _ _ _ _ _ _.

(* One round's pieces, from the cache C, the text ctx ++ [root] and the tree T -- the positions
   of the verify block, every layer's output at every slot (one verify forward), the greedy
   targets, the slot walk, the emission and the commit of the first k path slots -- shared by
   this loop, LoopTrunc.loop_trunc, LoopBatch's batched round and (gout, gcommit) SlotStream's
   sampling loop. *)
Definition rpos (T : dtree) (ctx : list nat) : nat -> nat :=
  fun j => length ctx + node_depth (slot_par T) j.

Definition gout {X K} (M : model X K) (C : cache K) (ctx : list nat) (root : nat) (T : dtree) : nat -> nat -> X :=
  fun l j => tx M C (slot_tok T root) (rpos T ctx) (ancestor_mask (slot_par T)) (S (n_nodes T)) l j.

Definition gtg {X K} (M : model X K) (head : X -> nat) (L : nat) C ctx root T : nat -> nat :=
  fun j => head (gout M C ctx root T L j).

Definition gwalk {X K} (M : model X K) (head : X -> nat) (L D : nat) C ctx root T : list nat :=
  slot_walk (slot_par T) (slot_tok T root) (slot_valid T) (S (n_nodes T)) (gtg M head L C ctx root T) D 0.

Definition gemit {X K} (M : model X K) (head : X -> nat) (L D : nat) C ctx root T : list nat :=
  emitted (slot_tok T root) (gtg M head L C ctx root T) (gwalk M head L D C ctx root T).

Definition gcommit {X K} (M : model X K) (D : nat) (C : cache K) ctx root T (P : list nat) (k : nat) : cache K :=
  commit C (tkv M C (slot_tok T root) (rpos T ctx) (ancestor_mask (slot_par T)) (S (n_nodes T)))
         (path_slots P D) k.

(* R rounds of the loop. State: the target's cache C (holding ctx), the root (the last
   committed token; the committed text is ctx ++ [root]) and the drafter's state. Each round:
   the drafter's tree; one verify forward over [root, tree]; the greedy targets head (layer-L
   output) per slot; the slot walk (depth <= D); emit the accepted tokens and the bonus; commit
   the first num_accepted + 1 path slots; the bonus is the next root. *)
Fixpoint loop {St X K} (M : model X K) (head : X -> nat) (L : nat) (dr : drafter St X) (D : nat)
    (st : St) (C : cache K) (ctx : list nat) (root : nat) (R : nat) : list nat :=
  match R with
  | O => []
  | S r =>
      let T := propose dr st (ctx ++ [root]) in
      let P := gwalk M head L D C ctx root T in
      gemit M head L D C ctx root T
      ++ loop M head L dr D (observe dr st (ctx ++ [root]) T (path_slots P D) (gout M C ctx root T))
              (gcommit M D C ctx root T P (S (num_accepted P))) (ctx ++ map (slot_tok T root) P)
              (gtg M head L C ctx root T (last P 0)) r
  end.

(* One round, exactly: the emission is the greedy rollout of ctx ++ [root] (1 to D + 1
   tokens), and the committed cache is the sequential cache of ctx ++ [root] ++ the accepted
   tokens, i.e. of the new committed text without its last token (the new root). *)
Theorem loop_round_exact : forall {X K} (M : model X K) (head : X -> nat) L C ctx root T D,
  dtree_ok T -> (forall l, C l = ents M l ctx) ->
  let g := fun c => head (hid M L c) in
  let par := slot_par T in
  let tok := slot_tok T root in
  let ns := S (n_nodes T) in
  let pos := fun j => length ctx + node_depth par j in
  let tg := fun s => head (tx M C tok pos (ancestor_mask par) ns L s) in
  let P := slot_walk par tok (slot_valid T) ns tg D 0 in
  let e := emitted tok tg P in
  e = greedy g (ctx ++ [root]) (length e) /\ 1 <= length e <= S D
  /\ e = map tok (tl P) ++ [tg (last P 0)]
  /\ (forall l, commit C (tkv M C tok pos (ancestor_mask par) ns) (path_slots P D) (S (num_accepted P)) l
               = ents M l (ctx ++ map tok P))
  /\ ctx ++ map tok P = (ctx ++ [root]) ++ map tok (tl P).
Proof.
  intros X K M head L C ctx root T D HT HC g par tok ns pos tg P e.
  pose proof (dtree_tree_ok T HT) as Hok. fold par ns in Hok.
  assert (Htg : forall s, s < ns -> tg s = g ((ctx ++ [root]) ++ spath tok par s)).
  { intros s Hs. unfold tg, g, pos.
    rewrite (tree_logits_exact M head C ctx tok par ns L s Hok HC Hs).
    rewrite (path_tokens_spath tok par ns s Hok Hs). rewrite <- app_assoc. reflexivity. }
  destruct (slot_walk_greedy g (ctx ++ [root]) par tok (slot_valid T) ns tg D Hok ltac:(unfold ns; lia) Htg)
    as [He Hlen].
  fold P e in He, Hlen.
  assert (HP : P = 0 :: tl P) by apply slot_walk_hd.
  split; [exact He|]. split; [exact Hlen|]. split; [reflexivity|]. split.
  - intro l. unfold path_slots, num_accepted.
    assert (Hm : S (pred (length P)) = length P) by (rewrite HP; reflexivity).
    rewrite Hm.
    assert (Hf : firstn (length P) (P ++ repeat 0 (S D - length P)) = P).
    { rewrite firstn_app, Nat.sub_diag, firstn_all. simpl. apply app_nil_r. }
    pose proof (commit_exact M C ctx tok par ns (P ++ repeat 0 (S D - length P)) (length P)
                  Hok ltac:(unfold ns; lia) HC) as Hc.
    rewrite Hf in Hc. exact (Hc (slot_walk_root_path par tok (slot_valid T) ns tg D) l).
  - rewrite HP at 1. simpl. rewrite <- app_assoc. reflexivity.
Qed.

(* V1 + V2 for the whole loop, at the slot level: started from the sequential cache of ctx
   (a prefill), after any number R of rounds, with any drafter (any state, any trees laid
   out with parents before children), the stream is exactly the greedy decode of the
   sequential model from ctx ++ [root]; each round emits 1 to D + 1 tokens. *)
Theorem loop_lossless_slots : forall {St X K} (M : model X K) (head : X -> nat) L (dr : drafter St X) D,
  (forall st txt, dtree_ok (propose dr st txt)) ->
  let g := fun c => head (hid M L c) in
  forall R st C ctx root, (forall l, C l = ents M l ctx) ->
  let out := loop M head L dr D st C ctx root R in
  out = greedy g (ctx ++ [root]) (length out) /\ R <= length out <= R * S D.
Proof.
  intros St X K M head L dr D Hdr g R. subst g.
  induction R as [|r IH]; intros st C ctx root HC; cbv zeta.
  { simpl. split; [reflexivity | lia]. }
  pose proof (loop_round_exact M head L C ctx root (propose dr st (ctx ++ [root])) D (Hdr _ _) HC)
    as Hround.
  cbv zeta in Hround. destruct Hround as (He & Hlen & Hform & Hcommit & Htxt).
  cbn [loop]. unfold gemit, gwalk, gtg, gcommit, gout, rpos. cbv beta zeta.
  match type of He with ?e = _ => set (E := e) in * end.
  match goal with |- context [loop M head L dr D ?a ?b ?c ?d r] =>
    specialize (IH a b c d Hcommit); cbv zeta in IH; set (rest := loop M head L dr D a b c d r) in * end.
  destruct IH as [Hr Hrl].
  rewrite Htxt, <- app_assoc in Hr.
  match type of Hform with _ = ?x ++ [?y] => change (x ++ [y]) with E in Hr end.
  split.
  - rewrite app_length, greedy_add, <- He, <- Hr. reflexivity.
  - rewrite app_length. simpl. lia.
Qed.
