(* TreePrune.v -- pruning keeps a draft tree valid (DY2's "pruning a leaf keeps the tree
   valid"; issue 61).

   Map to the rows of proofs/README.md:
   - DY2 : prune_alive_spec  (specjax.tree.prune's fori_loop computes: node i survives iff it
                              is valid, kept, and its parent is the root or survives)
           prune_closed      (the survivors are prefix-closed: a surviving node's parent is the
                              root or a survivor)
           prune_valid_tree  (whatever keep is, the pruned tree -- survivors valid, the others
                              normalised padding -- satisfies the tree rules the input
                              satisfied: parent before the node, parent valid, depth = parent's
                              depth + 1 (1 below the root), depth <= max_depth, token < V,
                              padding normalised)
           prune_leaf        (pruning a leaf -- keep false only at a valid node no valid node
                              hangs below -- removes exactly that node)

   Model: one row of specjax.tree.Tree, nodes 0..n-1, as LoopSlots.v's dtree: par i =
   parents[i] + 1 (0: a child of the root), dep i = depth[i], tok i, valid i; keep i the
   prune mask. prune's loop: alive := valid & keep; for i = 0..n-1: alive[i] &= (parents[i] < 0)
   | alive[max(parents[i], 0)] -- here prune_step, folded over seq 0 n. normalize (padding:
   parent -1, depth 0, token 0) is the function normalised below. DynaTree's construction
   never creates a child below tau (proofs/dynatree.md, "Pruning keeps the tree valid"); these
   theorems are the statement for a tree that is pruned after it was built. *)

From Coq Require Import List Arith Lia Bool.
Import ListNotations.

Definition prune_step (par : nat -> nat) (alive : nat -> bool) (i : nat) : nat -> bool :=
  fun k => if Nat.eqb k i then alive i && (Nat.eqb (par i) 0 || alive (pred (par i))) else alive k.

Definition prune_from (par : nat -> nat) (valid keep : nat -> bool) (m : nat) : nat -> bool :=
  fold_left (prune_step par) (seq 0 m) (fun i => valid i && keep i).

Definition prune_alive (par : nat -> nat) (valid keep : nat -> bool) (n : nat) : nat -> bool :=
  prune_from par valid keep n.

Lemma fold_outside : forall par a m f i, (i < a \/ a + m <= i) ->
  fold_left (prune_step par) (seq a m) f i = f i.
Proof.
  intros par a m; revert a; induction m as [|m IH]; intros a f i Hi; [reflexivity|].
  cbn [seq fold_left]. rewrite IH by lia. unfold prune_step.
  destruct (Nat.eqb_spec i a); [lia | reflexivity].
Qed.

(* Node i's value is final once step i has run. *)
Lemma prune_final : forall par valid keep m i, i < m ->
  prune_from par valid keep m i = prune_from par valid keep (S i) i.
Proof.
  intros par valid keep m i Hi. unfold prune_from.
  replace m with (S i + (m - S i)) by lia. rewrite seq_app, fold_left_app.
  apply fold_outside. lia.
Qed.

(* Tree's layout: parents[i] < i, i.e. par i <= i. *)
Definition layout_ok (par : nat -> nat) (n : nat) : Prop := forall i, i < n -> par i <= i.

Theorem prune_alive_spec : forall par valid keep n, layout_ok par n ->
  forall i, i < n ->
  prune_alive par valid keep n i
  = valid i && keep i && (Nat.eqb (par i) 0 || prune_alive par valid keep n (pred (par i))).
Proof.
  intros par valid keep n Hl i Hi. unfold prune_alive.
  rewrite (prune_final par valid keep n i Hi). unfold prune_from at 1.
  rewrite seq_S, fold_left_app. cbn [fold_left]. rewrite Nat.add_0_l. unfold prune_step at 1. rewrite Nat.eqb_refl.
  rewrite (fold_outside par 0 i _ i) by lia. fold (prune_from par valid keep i). f_equal.
  destruct (Nat.eqb_spec (par i) 0) as [|Hp]; [reflexivity|]. cbn [orb].
  assert (Hpi := Hl i Hi).
  rewrite (prune_final par valid keep i (pred (par i))) by lia.
  rewrite (prune_final par valid keep n (pred (par i))) by lia. reflexivity.
Qed.

Corollary prune_sub : forall par valid keep n i, layout_ok par n -> i < n ->
  prune_alive par valid keep n i = true -> valid i = true /\ keep i = true.
Proof.
  intros par valid keep n i Hl Hi H. rewrite prune_alive_spec in H by auto.
  apply andb_true_iff in H as [H _]. apply andb_true_iff in H. exact H.
Qed.

Corollary prune_closed : forall par valid keep n i, layout_ok par n -> i < n ->
  prune_alive par valid keep n i = true -> par i = 0 \/ prune_alive par valid keep n (pred (par i)) = true.
Proof.
  intros par valid keep n i Hl Hi H. rewrite prune_alive_spec in H by auto.
  apply andb_true_iff in H as [_ H]. apply orb_true_iff in H as [H | H]; [left; apply Nat.eqb_eq; exact H | right; exact H].
Qed.

(* The rules of specjax.tree.TREE_RULES for one row (max_depth Dm, vocabulary V). *)
Definition tree_rules (n : nat) (par dep tok : nat -> nat) (valid : nat -> bool) (Dm V : nat) : Prop :=
  forall i, i < n ->
    (valid i = true ->
       par i <= i
       /\ (par i = 0 -> dep i = 1)
       /\ (par i <> 0 -> valid (pred (par i)) = true /\ dep i = S (dep (pred (par i))))
       /\ dep i <= Dm /\ tok i < V)
    /\ (valid i = false -> par i = 0 /\ dep i = 0 /\ tok i = 0).

(* normalize after prune: the pruned slots become padding. *)
Definition normalised (alive : nat -> bool) (f : nat -> nat) : nat -> nat :=
  fun i => if alive i then f i else 0.

(* Pruning with any mask keeps every rule (V > 0: the padding token 0 is a token). *)
Theorem prune_valid_tree : forall n par dep tok valid keep Dm V, 0 < V ->
  tree_rules n par dep tok valid Dm V ->
  let alive := prune_alive par valid keep n in
  tree_rules n (normalised alive par) (normalised alive dep) (normalised alive tok) alive Dm V.
Proof.
  intros n par dep tok valid keep Dm V HV Hr alive.
  assert (Hl : layout_ok par n).
  { intros i Hi. destruct (valid i) eqn:Hv.
    - exact (proj1 (proj1 (Hr i Hi) Hv)).
    - destruct (proj2 (Hr i Hi) Hv) as [-> _]. lia. }
  intros i Hi. unfold normalised. split.
  - intros Ha. rewrite Ha. destruct (prune_sub par valid keep n i Hl Hi Ha) as [Hv _].
    destruct (proj1 (Hr i Hi) Hv) as (H1 & H2 & H3 & H4 & H5).
    split; [exact H1|]. split; [exact H2|]. split; [|auto].
    intros Hp. destruct (prune_closed par valid keep n i Hl Hi Ha) as [E | Hpa]; [contradiction|].
    fold alive in Hpa. rewrite Hpa. split; [reflexivity|]. apply H3. exact Hp.
  - intros Ha. rewrite Ha. auto.
Qed.

(* Pruning a leaf: the input's valid nodes hang below the root or valid nodes, and no valid
   node hangs below the leaf l. Exactly l is removed. *)
Theorem prune_leaf : forall par valid n l, layout_ok par n ->
  (forall i, i < n -> valid i = true -> par i = 0 \/ valid (pred (par i)) = true) ->
  (forall i, i < n -> valid i = true -> par i <> S l) ->
  forall i, i < n ->
  prune_alive par valid (fun k => negb (Nat.eqb k l)) n i = valid i && negb (Nat.eqb i l).
Proof.
  intros par valid n l Hl Hcl Hleaf i. induction i as [i IH] using lt_wf_ind. intros Hi.
  rewrite prune_alive_spec by auto.
  destruct (valid i) eqn:Hv; [|reflexivity]. destruct (Nat.eqb_spec i l) as [|Hne]; [reflexivity|].
  cbn [andb negb]. destruct (Nat.eqb_spec (par i) 0) as [|Hp]; [reflexivity|]. cbn [orb].
  assert (Hpi := Hl i Hi).
  rewrite IH by lia.
  destruct (Hcl i Hi Hv) as [|Hpv]; [contradiction|]. rewrite Hpv.
  destruct (Nat.eqb_spec (pred (par i)) l) as [E|]; [|reflexivity].
  exfalso. apply (Hleaf i Hi Hv). lia.
Qed.

(* Hence pruning a leaf keeps the tree valid, and the result is the input without the leaf. *)
Corollary prune_leaf_valid : forall n par dep tok valid Dm V l, 0 < V ->
  tree_rules n par dep tok valid Dm V ->
  (forall i, i < n -> valid i = true -> par i <> S l) ->
  let alive := prune_alive par valid (fun k => negb (Nat.eqb k l)) n in
  tree_rules n (normalised alive par) (normalised alive dep) (normalised alive tok) alive Dm V
  /\ (forall i, i < n -> alive i = valid i && negb (Nat.eqb i l)).
Proof.
  intros n par dep tok valid Dm V l HV Hr Hleaf alive. split.
  - apply prune_valid_tree; auto.
  - assert (Hl : layout_ok par n).
    { intros i Hi. destruct (valid i) eqn:Hv.
      - exact (proj1 (proj1 (Hr i Hi) Hv)).
      - destruct (proj2 (Hr i Hi) Hv) as [-> _]. lia. }
    apply prune_leaf; auto.
    intros i Hi Hv. destruct (proj1 (Hr i Hi) Hv) as (_ & _ & H3 & _).
    destruct (Nat.eq_dec (par i) 0); [left; auto | right; apply H3; auto].
Qed.
