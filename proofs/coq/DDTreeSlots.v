(* DDTreeSlots.v -- Proposition 3's heap as the code's slot array (DD4; issue 61, item 3).

   Map to the rows of proofs/README.md:
   - DD4 : slots_invariant    (specjax.drafters.ddtree._select_row_pops: whatever live slot each
                               pop takes, after t pops at most t + 1 slots are in use -- so the
                               array of n_out + 1 slots never overflows --, every live slot is
                               below the slot counter, and no two live slots share a parent:
                               the frontier never holds a candidate twice)
           slots_no_duplicate (two distinct live slots are never the same candidate (parent, rank))

   Model: the code's candidate array, one entry per slot: depth, parent (the parent's output
   index + 1; 0 for a child of the root, the code's -1), rank, live. Initially slot 0 is
   (1, root, 0, live) and n_slots = 1. A pop of the live slot i (the code's arg-min under its
   keys; here any live slot, so the statements hold for every tie rule and every score) at
   output index t writes slot i <- its next sibling (same depth and parent, rank + 1, live iff
   rank + 1 < K) and then slot n_slots <- its first child (depth + 1, parent t, rank 0, live iff
   depth < L), and n_slots grows by one iff that child is live -- the code's `.at[i]` then
   `.at[n_slots]` updates. Scores are not modelled (DDTreeHeap.v proves the pops are the order;
   this file proves the array refines the list of frontier entries that DDTreeHeap.v models). *)

From Coq Require Import Arith Lia Bool.

Record entry := mk_entry { e_dep : nat; e_par : nat; e_rank : nat; e_live : bool }.

Record sstate := mk_sstate { slots : nat -> entry; n_slots : nat; pops : nat }.

Definition start_slots : sstate :=
  mk_sstate (fun j => if Nat.eqb j 0 then mk_entry 1 0 0 true else mk_entry 0 0 0 false) 1 0.

Definition pop_step (L K : nat) (st : sstate) (i : nat) : sstate :=
  let e := slots st i in
  mk_sstate
    (fun j => if Nat.eqb j (n_slots st) then mk_entry (S (e_dep e)) (S (pops st)) 0 (e_dep e <? L)
              else if Nat.eqb j i then mk_entry (e_dep e) (e_par e) (S (e_rank e)) (S (e_rank e) <? K)
              else slots st j)
    (n_slots st + (if e_dep e <? L then 1 else 0))
    (S (pops st)).

(* The states the loop reaches: each pop takes a live slot. *)
Inductive reach (L K : nat) : sstate -> Prop :=
  | reach_start : reach L K start_slots
  | reach_pop : forall st i, reach L K st -> e_live (slots st i) = true -> reach L K (pop_step L K st i).

Definition inv (st : sstate) : Prop :=
  n_slots st <= S (pops st)
  /\ (forall j, e_live (slots st j) = true -> j < n_slots st)
  /\ (forall j, e_live (slots st j) = true -> e_par (slots st j) <= pops st)
  /\ (forall j j', j <> j' -> e_live (slots st j) = true -> e_live (slots st j') = true ->
        e_par (slots st j) <> e_par (slots st j')).

Lemma inv_start_slots : inv start_slots.
Proof.
  unfold inv, start_slots; simpl. split; [lia|]. split; [|split].
  - intros j H. destruct (Nat.eqb_spec j 0); [lia | discriminate].
  - intros j H. destruct (Nat.eqb_spec j 0); simpl; lia.
  - intros j j' Hne H H'. destruct (Nat.eqb_spec j 0), (Nat.eqb_spec j' 0); try discriminate; lia.
Qed.

Lemma inv_pop : forall L K st i, inv st -> e_live (slots st i) = true -> inv (pop_step L K st i).
Proof.
  intros L K st i (HA & HB & HC & HD) Hi.
  assert (Hin : i < n_slots st) by (apply HB; exact Hi).
  unfold inv, pop_step; simpl.
  set (e := slots st i).
  split; [destruct (e_dep e <? L); lia|]. split; [|split].
  - intros j H. destruct (Nat.eqb_spec j (n_slots st)) as [Ej|Hn]; [subst j|]; simpl in H.
    + rewrite H. lia.
    + destruct (Nat.eqb_spec j i) as [Eji|Hji]; [subst j|]; [lia|]. specialize (HB j H). lia.
  - intros j H. destruct (Nat.eqb_spec j (n_slots st)) as [Ej|Hn]; [subst j|]; simpl in *; [lia|].
    destruct (Nat.eqb_spec j i) as [Eji|Hji]; [subst j|]; simpl in *.
    + specialize (HC i Hi). fold e in HC. lia.
    + specialize (HC j H). lia.
  - intros j j' Hne H H'.
    assert (Hpar : forall k, k <> n_slots st ->
              e_live (if k =? i then mk_entry (e_dep e) (e_par e) (S (e_rank e)) (S (e_rank e) <? K)
                      else slots st k) = true ->
              e_par (if k =? i then mk_entry (e_dep e) (e_par e) (S (e_rank e)) (S (e_rank e) <? K)
                     else slots st k) <= pops st /\
              e_par (if k =? i then mk_entry (e_dep e) (e_par e) (S (e_rank e)) (S (e_rank e) <? K)
                     else slots st k) = e_par (slots st k) /\ e_live (slots st k) = true).
    { intros k Hk Hl. destruct (Nat.eqb_spec k i) as [Eki|Hki]; simpl in *.
      - subst k. specialize (HC i Hi). fold e in HC |- *. auto.
      - auto. }
    destruct (Nat.eqb_spec j (n_slots st)) as [Ej|Hn]; destruct (Nat.eqb_spec j' (n_slots st)) as [Ej'|Hn'].
    + lia.
    + simpl. destruct (Hpar j' Hn' H') as [Hp _]. lia.
    + simpl. destruct (Hpar j Hn H) as [Hp _]. lia.
    + destruct (Hpar j Hn H) as (_ & Ej & Lj). destruct (Hpar j' Hn' H') as (_ & Ej' & Lj').
      rewrite Ej, Ej'. exact (HD j j' Hne Lj Lj').
Qed.

(* Proposition 3 on the slot array: the invariant holds in every reachable state. *)
Theorem slots_invariant : forall L K st, reach L K st -> inv st.
Proof.
  intros L K st H. induction H as [|st i H IH Hi]; [exact inv_start_slots|].
  apply inv_pop; auto.
Qed.

(* Hence the frontier never holds one candidate twice, and after t pops at most t + 1 slots
   are used (n_out pops fit in the code's n_out + 1 slots). *)
Corollary slots_no_duplicate : forall L K st j j', reach L K st -> j <> j' ->
  e_live (slots st j) = true -> e_live (slots st j') = true ->
  (e_par (slots st j), e_rank (slots st j)) <> (e_par (slots st j'), e_rank (slots st j'))
  /\ n_slots st <= S (pops st).
Proof.
  intros L K st j j' H Hne Hj Hj'. destruct (slots_invariant L K st H) as (HA & _ & _ & HD).
  split; [|exact HA]. intro E. inversion E. exact (HD j j' Hne Hj Hj' H1).
Qed.
