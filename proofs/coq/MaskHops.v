(* MaskHops.v -- the code's depth-limited ancestor mask equals the exact one up to depth D
   (issue 61, item 3).

   Map to the rows of proofs/README.md:
   - V2  : hop_mask_exact        (specjax.tree.ancestor_mask(tree, max_depth=D): each row marks
                                  the slots up^h(i), h = 0..max(D, 1), found by pointer steps;
                                  for a slot of depth <= max(D, 1) this is exactly TreeAttention's
                                  ancestor_mask row, the recurrence row(i) = row(par i) | e_i)
           hop_mask_deep_row     (a slot deeper than max(D, 1) does not see the root: the rows
                                  the code leaves inexact, which no walk of depth <= D reaches)
           tx_hop_mask           (hence the verify forward over a block whose slots all have
                                  depth <= max(D, 1) computes, at every layer and slot, what it
                                  computes with the exact mask: loop_round_exact and
                                  loop_lossless_slots hold for the code's mask on such trees)

   Model: as TreeAttention.v. The code's pointer array is up: up[0] = 0 (the root is its own
   parent, so chains end there) and up[i] = par i for a slot i > 0 (Tree.parents + 1; invalid
   nodes point at the root in the code, here par is any parent function of a tree laid out
   parents first); hop h i = up^h(i), the h-th entry of the code's `hops` list; the row of i
   marks {hop h i | h <= max(D, 1)} (the scatter of `targets`). *)

From Coq Require Import List Arith Lia Bool.
From Specjax Require Import TreeAttention.
Import ListNotations.

Definition up (par : nat -> nat) (i : nat) : nat := if Nat.eqb i 0 then 0 else par i.

Fixpoint hop (par : nat -> nat) (h i : nat) : nat :=
  match h with
  | O => i
  | S h' => hop par h' (up par i)
  end.

(* ancestor_mask(tree, max_depth = D): slot j is marked in row i iff j = up^h(i) for some
   h <= max(D, 1) (the code takes max(max_depth, 1) pointer steps). *)
Definition hop_mask (par : nat -> nat) (D i j : nat) : bool :=
  existsb (fun h => Nat.eqb (hop par h i) j) (seq 0 (S (Nat.max D 1))).

Lemma hop_root : forall par h, hop par h 0 = 0.
Proof. intros par h; induction h as [|h IH]; simpl; auto. Qed.

Lemma hop_add : forall par a b i, hop par (a + b) i = hop par b (hop par a i).
Proof. intros par a; induction a as [|a IH]; intros b i; simpl; auto. Qed.

Lemma hop_child : forall par h i, 0 < i -> hop par (S h) i = hop par h (par i).
Proof.
  intros par h i Hi. simpl. unfold up. destruct (Nat.eqb_spec i 0); [lia | reflexivity].
Qed.

(* The ancestors of i are the hops from i up to its depth. *)
Lemma anc_hop : forall par n i, tree_ok par n -> i < n ->
  forall j, In j (anc par i) <-> exists h, h <= node_depth par i /\ hop par h i = j.
Proof.
  intros par n i Hok; induction i as [i IH] using lt_wf_ind; intros Hi j.
  destruct (Nat.eq_dec i 0) as [->|H0].
  - rewrite anc_0, depth_0. split.
    + intros [<-|[]]. exists 0. auto.
    + intros (h & Hh & Hj). left. replace h with 0 in Hj by lia. exact Hj.
  - assert (Hp : par i < i) by (apply Hok; lia).
    rewrite (anc_S par n i Hok) by lia. rewrite (depth_S par n i Hok) by lia.
    rewrite in_app_iff, (IH (par i) Hp ltac:(lia) j). simpl. split.
    + intros [(h & Hh & Hj)|[<-|[]]].
      * exists (S h). split; [lia|]. rewrite hop_child by lia. exact Hj.
      * exists 0. split; [lia | reflexivity].
    + intros (h & Hh & Hj). destruct h as [|h].
      * right. left. exact Hj.
      * left. exists h. split; [lia|]. rewrite <- hop_child by lia. exact Hj.
Qed.

(* After depth(i) steps the chain is at the root and stays there. *)
Lemma hop_depth : forall par n i, tree_ok par n -> i < n -> hop par (node_depth par i) i = 0.
Proof.
  intros par n i Hok; induction i as [i IH] using lt_wf_ind; intros Hi.
  destruct (Nat.eq_dec i 0) as [->|H0]; [reflexivity|].
  assert (Hp : par i < i) by (apply Hok; lia).
  rewrite (depth_S par n i Hok) by lia. rewrite hop_child by lia. apply IH; lia.
Qed.

Lemma hop_mask_true : forall par D i j,
  hop_mask par D i j = true <-> exists h, h <= Nat.max D 1 /\ hop par h i = j.
Proof.
  intros par D i j. unfold hop_mask. rewrite existsb_exists. split.
  - intros (h & Hin & Hh). apply in_seq in Hin. apply Nat.eqb_eq in Hh. exists h. split; [lia | exact Hh].
  - intros (h & Hh & Hj). exists h. split; [apply in_seq; lia | apply Nat.eqb_eq; exact Hj].
Qed.

(* The code's depth-limited row is exact for every slot of depth <= max(D, 1). *)
Theorem hop_mask_exact : forall par n D i j, tree_ok par n -> i < n -> node_depth par i <= Nat.max D 1 ->
  hop_mask par D i j = ancestor_mask par i j.
Proof.
  intros par n D i j Hok Hi Hd. apply eq_true_iff_eq.
  rewrite hop_mask_true, ancestor_mask_anc, existsb_exists.
  split.
  - intros (h & Hh & Hj). exists j. split; [|apply Nat.eqb_refl].
    apply (anc_hop par n i Hok Hi). destruct (Nat.le_gt_cases h (node_depth par i)) as [Hle|Hgt].
    + exists h. auto.
    + exists (node_depth par i). split; [lia|].
      replace h with (node_depth par i + (h - node_depth par i)) in Hj by lia.
      rewrite hop_add, (hop_depth par n i Hok Hi), hop_root in Hj.
      rewrite (hop_depth par n i Hok Hi). exact Hj.
  - intros (k & Hk & Hjk). apply Nat.eqb_eq in Hjk. subst k.
    destruct (proj1 (anc_hop par n i Hok Hi j) Hk) as (h & Hh & Hj). exists h. split; [lia | exact Hj].
Qed.

(* The rows the code leaves inexact: a slot deeper than max(D, 1) does not see the root. *)
Theorem hop_mask_deep_row : forall par n D i, tree_ok par n -> i < n -> Nat.max D 1 < node_depth par i ->
  hop_mask par D i 0 = false.
Proof.
  intros par n D i Hok Hi Hd. apply not_true_is_false. intro H.
  apply hop_mask_true in H as (h & Hh & Hj).
  (* hop h i is the ancestor at depth depth(i) - h > 0, not the root *)
  assert (Hgen : forall k i', i' < n -> k <= node_depth par i' ->
            node_depth par (hop par k i') = node_depth par i' - k /\ hop par k i' < n).
  { induction k as [|k IHk]; intros i' Hi' Hk; [simpl; split; [lia | exact Hi']|].
    destruct (Nat.eq_dec i' 0) as [->|H0]; [rewrite depth_0 in Hk; lia|].
    assert (Hp : par i' < i') by (apply Hok; lia).
    rewrite hop_child by lia. rewrite (depth_S par n i' Hok) in Hk |- * by lia.
    destruct (IHk (par i') ltac:(lia) ltac:(lia)) as [E L]. split; [lia | exact L]. }
  destruct (Hgen h i Hi ltac:(lia)) as [E _]. rewrite Hj, depth_0 in E. lia.
Qed.

(* Hence the verify forward is the same with the code's mask, at every layer and slot, when
   every slot of the block has depth <= max(D, 1). *)
Theorem tx_hop_mask : forall {X K} (M : model X K) C tok pos par n D,
  tree_ok par n -> (forall i, i < n -> node_depth par i <= Nat.max D 1) ->
  forall l i, i < n -> tx M C tok pos (hop_mask par D) n l i = tx M C tok pos (ancestor_mask par) n l i.
Proof.
  intros X K M C tok pos par n D Hok Hd l. induction l as [|l IH]; intros i Hi; [reflexivity|].
  simpl. rewrite IH by exact Hi. f_equal. f_equal.
  rewrite (filter_ext (hop_mask par D i) (ancestor_mask par i))
    by (intro j; exact (hop_mask_exact par n D i j Hok Hi (Hd i Hi))).
  apply map_ext_in. intros j Hj. apply filter_In in Hj as [Hj _]. apply in_seq in Hj.
  rewrite IH by lia. reflexivity.
Qed.
