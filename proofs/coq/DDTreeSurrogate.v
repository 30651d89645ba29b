(* DDTreeSurrogate.v -- DDTree Proposition 1 (row DD1 of proofs/README.md; proofs/ddtree.md §2):
   the expected acceptance length under the factorised draft law equals the sum of the
   prefix probabilities of a valid (prefix-closed) tree.

   Map to the rows of proofs/README.md:
   - DD1 : ddtree_proposition1   (E_{Y~Q}[alpha_T(Y)] = sum_{u in T} q(u))
           alpha_is_count        (for valid T, alpha_T(y) = #{d in 1..L : y_1..y_d in T})
           prefix_marginal       (Pr_Q[(Y_1..Y_d) = u] = q(u): the marginalisation step)
           proposition1_needs_validity (the hypothesis is needed: T = {(a,b)} gives 2 q(a,b))

   Model / differences from the written statement (see proofs/README.md,
   "Machine-checked (Coq)"):
   - exact rationals (Q) instead of float32 / float64; no logarithms;
   - vocabulary {0, ..., V-1} (tokens are nat), depth L; q d v is the drafter's marginal at
     depth d = 1..L for token v; the only hypothesis on q is that each row q d sums to 1
     over the vocabulary for d = 1..L (non-negativity is not needed for this identity);
   - the law Q is the product law: Q(y) = q 1 y_1 * ... * q L y_L on V^L, and the
     expectation is the finite sum over all y in V^L (enumerated by [seqs V L]);
   - a tree is a duplicate-free list of prefixes u (1 <= |u| <= L, tokens < V); valid =
     the parent of every member of depth >= 2 is a member; alpha_T(y) = max{d in 1..L :
     (y_1..y_d) in T}, 0 if there is none. *)

From Coq Require Import List Arith Lia QArith Lqa.
From Specjax Require Import GreedyWalk QSums.
Import ListNotations.
Local Open Scope nat_scope.

(* ---------- sequences, law, acceptance length ---------- *)

(* All sequences of length n over {0..V-1}. *)
Fixpoint seqs (V n : nat) : list (list nat) :=
  match n with
  | O => [[]]
  | S n' => flat_map (fun v => map (cons v) (seqs V n')) (seq 0 V)
  end.

(* Product of the marginals along u, starting at depth k. *)
Fixpoint qprod (q : nat -> nat -> Q) (k : nat) (u : list nat) : Q :=
  match u with
  | [] => 1%Q
  | a :: u' => (q k a * qprod q (S k) u')%Q
  end.

(* Prefix probability q(u) = q_1(u_1) ... q_d(u_d); also the law Q(y) for |y| = L. *)
Definition qp (q : nat -> nat -> Q) (u : list nat) : Q := qprod q 1 u.

Definition normalized (q : nat -> nat -> Q) (V k n : nat) : Prop :=
  forall j, k <= j < k + n -> (qsum (q j) (seq 0 V) == 1)%Q.

Definition is_prefix (V L : nat) (u : list nat) : Prop :=
  1 <= length u <= L /\ Forall (fun v => v < V) u.

Definition valid (T : tree) : Prop :=
  forall u a, In (u ++ [a]) T -> u <> [] -> In u T.

Definition mx (l : list nat) : nat := fold_right Nat.max 0 l.

Definition memb (u : list nat) (T : tree) : bool :=
  if in_dec path_eq_dec u T then true else false.

Definition alpha (T : tree) (L : nat) (y : list nat) : nat :=
  mx (map (fun d => if memb (firstn d y) T then d else 0) (seq 1 L)).

Definition expect (q : nat -> nat -> Q) (V L : nat) (f : list nat -> Q) : Q :=
  qsum (fun y => (qp q y * f y)%Q) (seqs V L).

Definition qnat (n : nat) : Q := inject_Z (Z.of_nat n).

(* ---------- facts about seqs and firstn ---------- *)

Lemma seqs_length : forall V n y, In y (seqs V n) -> length y = n.
Proof.
  induction n; simpl; intros y H.
  - destruct H as [<- | []]. reflexivity.
  - apply in_flat_map in H. destruct H as (v & _ & H). apply in_map_iff in H.
    destruct H as (y' & <- & H). simpl. f_equal. auto.
Qed.

Lemma firstn_snoc : forall (y : list nat) d, d < length y ->
  firstn (S d) y = firstn d y ++ [nth d y 0].
Proof.
  induction y as [|b y IH]; intros d H; [simpl in H; lia|]. destruct d; [reflexivity|].
  change (firstn (S (S d)) (b :: y)) with (b :: firstn (S d) y).
  rewrite IH by (simpl in H; lia). reflexivity.
Qed.

(* ---------- alpha = number of depths reached ---------- *)

Lemma mx_app : forall l1 l2, mx (l1 ++ l2) = Nat.max (mx l1) (mx l2).
Proof. induction l1; intros; simpl; [reflexivity|]. unfold mx in *. simpl. rewrite IHl1. lia. Qed.

Lemma max_count : forall (P : nat -> bool) n,
  (forall d, 1 <= d -> d < n -> P (S d) = true -> P d = true) ->
  mx (map (fun d => if P d then d else 0) (seq 1 n)) = length (filter P (seq 1 n)) /\
  length (filter P (seq 1 n)) <= n /\
  (1 <= n -> P n = true -> length (filter P (seq 1 n)) = n).
Proof.
  intros P. induction n; intros Hc; [simpl; lia|].
  destruct IHn as (H1 & H2 & H3); [intros d ? ? ?; apply Hc; [lia|lia|assumption]|].
  rewrite seq_S, map_app, filter_app, mx_app, app_length. simpl.
  replace (1 + n) with (S n) by lia.
  destruct (P (S n)) eqn:E; simpl.
  - assert (Hn : n = 0 \/ length (filter P (seq 1 n)) = n).
    { destruct n; [left; reflexivity|]. right. apply H3; [lia|]. apply Hc; auto; lia. }
    destruct Hn as [-> | Hn]; [simpl; lia|]. lia.
  - lia.
Qed.

Lemma qnat_count : forall (P : nat -> bool) l,
  (qnat (length (filter P l)) == qsum (fun d => if P d then 1 else 0) l)%Q.
Proof.
  induction l; [reflexivity|]. rewrite qsum_cons. simpl. destruct (P a); simpl.
  - unfold qnat in *. rewrite Nat2Z.inj_succ. unfold Z.succ. rewrite inject_Z_plus, IHl. ring.
  - rewrite IHl. ring.
Qed.

(* For a valid tree, the acceptance length counts the depths whose prefix is in T. *)
Theorem alpha_is_count : forall T L y, valid T -> length y = L ->
  alpha T L y = length (filter (fun d => memb (firstn d y) T) (seq 1 L)).
Proof.
  intros T L y HT Hy. unfold alpha.
  destruct (max_count (fun d => memb (firstn d y) T) L) as [H _]; [|exact H].
  intros d H1 H2 H3. unfold memb in *.
  destruct (in_dec path_eq_dec (firstn (S d) y) T) as [I | I]; [|discriminate].
  rewrite firstn_snoc in I by lia.
  destruct (in_dec path_eq_dec (firstn d y) T) as [J | J]; [reflexivity|].
  exfalso. apply J. apply (HT _ _ I).
  intro E. apply (f_equal (@length nat)) in E. rewrite firstn_length in E. simpl in E. lia.
Qed.

(* ---------- marginalisation ---------- *)

Lemma normalized_shift : forall q V k n, normalized q V k (S n) -> normalized q V (S k) n.
Proof. intros q V k n H j Hj. apply H. lia. Qed.

Lemma total_mass : forall q V n k, normalized q V k n ->
  (qsum (qprod q k) (seqs V n) == 1)%Q.
Proof.
  intros q V n. induction n; intros k Hn.
  - reflexivity.
  - simpl. rewrite qsum_flat_map.
    rewrite (qsum_ext _ _ (fun v => q k v * qsum (qprod q (S k)) (seqs V n))%Q).
    + rewrite (qsum_ext _ _ (q k)).
      * apply Hn. lia.
      * intros v _. rewrite IHn; [ring|]. apply normalized_shift; auto.
    + intros v _. rewrite qsum_map. simpl. rewrite <- qsum_scal_l. reflexivity.
Qed.

(* Pr_Q[(Y_1..Y_d) = u] = q(u) for every u with d = |u| <= n tokens < V. *)
Lemma prefix_marginal_from : forall q V u n k,
  length u <= n -> Forall (fun v => v < V) u -> normalized q V k n ->
  (qsum (fun y => if path_eq_dec (firstn (length u) y) u then qprod q k y else 0) (seqs V n)
   == qprod q k u)%Q.
Proof.
  intros q V u. induction u as [|a u IH]; intros n k Hl Hf Hn.
  - simpl. rewrite (qsum_ext _ _ (qprod q k)); [apply total_mass; auto|].
    intros y _. destruct (path_eq_dec [] []); [reflexivity | contradiction].
  - destruct n as [|n]; [simpl in Hl; lia|]. inversion Hf as [|? ? Ha Hf']; subst.
    cbn [seqs]. rewrite qsum_flat_map.
    rewrite (qsum_ext _ _ (fun v => if Nat.eqb v a then q k v *
        qsum (fun y => if path_eq_dec (firstn (length u) y) u then qprod q (S k) y else 0)
             (seqs V n) else 0)%Q).
    + rewrite qsum_pick_nat; [| apply seq_NoDup | apply in_seq; lia].
      rewrite IH; [reflexivity | simpl in Hl; lia | auto | apply normalized_shift; auto].
    + intros v _. rewrite qsum_map. destruct (Nat.eqb_spec v a) as [-> | Hva].
      * rewrite <- qsum_scal_l. apply qsum_ext. intros y _. cbn [firstn length qprod].
        destruct (path_eq_dec (a :: firstn (length u) y) (a :: u)) as [E | E];
          destruct (path_eq_dec (firstn (length u) y) u) as [E' | E'].
        -- reflexivity.
        -- inversion E. contradiction.
        -- exfalso. apply E. rewrite E'. reflexivity.
        -- ring.
      * apply qsum_zero. intros y _. cbn [firstn length qprod].
        destruct (path_eq_dec (v :: firstn (length u) y) (a :: u)) as [E | E];
          [inversion E; contradiction | reflexivity].
Qed.

Theorem prefix_marginal : forall q V L u, is_prefix V L u -> normalized q V 1 L ->
  (qsum (fun y => if path_eq_dec (firstn (length u) y) u then qp q y else 0) (seqs V L)
   == qp q u)%Q.
Proof.
  intros q V L u [Hl Hf] Hn. apply prefix_marginal_from; auto. lia.
Qed.

(* ---------- Proposition 1 ---------- *)

Lemma indicator_in_sum : forall (x : list nat) (T : tree) (c : Q), NoDup T ->
  ((if memb x T then c else 0) == qsum (fun u => if path_eq_dec x u then c else 0) T)%Q.
Proof.
  intros x T c. induction T as [|u T IH]; intros ND.
  - reflexivity.
  - inversion ND as [|? ? Hu ND']; subst. rewrite qsum_cons. unfold memb in *. simpl.
    destruct (path_eq_dec u x) as [-> | Hux].
    + destruct (path_eq_dec x x); [|contradiction].
      rewrite qsum_zero; [ring|]. intros w Hw. destruct (path_eq_dec x w); [subst; contradiction|reflexivity].
    + destruct (path_eq_dec x u); [subst; contradiction|].
      destruct (in_dec path_eq_dec x T); rewrite <- IH by auto; ring.
Qed.

(* DDTree Proposition 1 (ddtree.md §2): for a valid tree T and normalised q_d,
   E_{Y~Q}[alpha_T(Y)] = sum_{u in T} q(u). *)
Theorem ddtree_proposition1 : forall (q : nat -> nat -> Q) (V L : nat) (T : tree),
  normalized q V 1 L -> NoDup T -> valid T -> (forall u, In u T -> is_prefix V L u) ->
  (expect q V L (fun y => qnat (alpha T L y)) == qsum (qp q) T)%Q.
Proof.
  intros q V L T Hn ND HT HP. unfold expect.
  (* alpha = count of reached depths *)
  rewrite (qsum_ext _ _ (fun y => qsum (fun d => if memb (firstn d y) T then qp q y else 0%Q) (seq 1 L))).
  2: { intros y Hy. rewrite alpha_is_count by (auto; eapply seqs_length; eauto).
       rewrite qnat_count, <- qsum_scal_l. apply qsum_ext. intros d _.
       destruct (memb (firstn d y) T); ring. }
  rewrite qsum_swap.
  (* for each depth d: Pr[(Y_1..Y_d) in T] = sum of q(u) over the members of depth d *)
  rewrite (qsum_ext _ _ (fun d => qsum (fun u => if Nat.eqb (length u) d then qp q u else 0%Q) T)).
  2: { intros d Hd. apply in_seq in Hd.
       rewrite (qsum_ext _ _ (fun y => qsum (fun u => if path_eq_dec (firstn d y) u then qp q y else 0%Q) T))
         by (intros; apply indicator_in_sum; auto).
       rewrite qsum_swap. apply qsum_ext. intros u Hu.
       destruct (Nat.eqb_spec (length u) d) as [<- | Hne].
       - apply prefix_marginal; auto.
       - apply qsum_zero. intros y Hy. destruct (path_eq_dec (firstn d y) u) as [E|E]; [|reflexivity].
         exfalso. apply Hne. rewrite <- E, firstn_length. apply seqs_length in Hy. lia. }
  rewrite qsum_swap. apply qsum_ext. intros u Hu.
  destruct (HP u Hu) as [Hl _].
  rewrite (qsum_ext _ _ (fun d => if Nat.eqb d (length u) then qp q u else 0%Q)).
  - apply (qsum_pick_nat (fun _ => qp q u)); [apply seq_NoDup | apply in_seq; lia].
  - intros d _. rewrite Nat.eqb_sym. reflexivity.
Qed.

(* Where validity is used (ddtree.md §2): T = {(0, 0)} without (0) gives 2 q(0,0), not q(0,0).
   Example with V = 1, L = 2, q = 1: the expectation is 2 while the sum is 1. *)
Theorem proposition1_needs_validity :
  let q := fun (_ _ : nat) => 1%Q in
  let T : tree := [[0; 0]] in
  ~ (expect q 1 2 (fun y => qnat (alpha T 2 y)) == qsum (qp q) T)%Q.
Proof. intros q T. vm_compute. discriminate. Qed.
