(* GraftCoverage.v -- Graft Propositions 1-3 (rows G1, G2, G3 of proofs/README.md).

   Map to the rows of proofs/README.md:
   - G1 : walk_monotone            (pointwise: T1 within T2 => accepted length on T1 <= on T2,
                                    for every target rule g, so also for the sampling walk
                                    when both walks share the per-path samples)
          walk_monotone_prefix     (stronger: the accepted path on T1 is a prefix of that on T2)
          expected_walk_monotone   (in expectation over any finite law on rules, weights >= 0)
   - G2 : pruning_loses            (T_pi within T_0 => A(T_pi) <= A(T_0), i.e. R_pi >= 0)
          grafting_cannot_lose     (T_g = T_pi ++ G => A(T_pi) <= A(T_g), i.e. Gamma_g >= 0)
          graft_identity_eq26      (A_0 - A_g = R_pi - Gamma_g)
          grafting_cannot_lose_pointwise (the same, pointwise for every rule)
   - G3 : coverage_gain            (Cov(S u R) - Cov(S) = sum of p over R \ S)
          coverage_gain_nonneg     (>= 0 when p >= 0)

   Model: the walk, trees and rules are those of GreedyWalk.v (an abstract rule
   g : list nat -> nat giving the target token after a path; at T = 0 it is the argmax, at
   T > 0 it is the per-path sample shared by the two walks -- the coupling of graft.md G1).
   A(T) is the expected accepted length under a finite law on rules: a list of
   (weight, rule) pairs with rational weights >= 0 (exact rationals, not float).
   For G3 tokens are nat, p : nat -> Q, sets are lists, S u R is S ++ R, and a sum over a set
   is the sum over the list with duplicates removed (nodup). *)

From Coq Require Import List Arith Lia QArith Lqa Permutation.
From Specjax Require Import GreedyWalk QSums.
Import ListNotations.
Local Open Scope nat_scope.

(* ---------- G1: monotonicity in tree inclusion ---------- *)

Definition subtree (T1 T2 : tree) : Prop := forall u, In u T1 -> In u T2.

Lemma walk_monotone_prefix : forall g T1 T2 ctx fuel p, subtree T1 T2 ->
  exists r, accept g T2 ctx p fuel = accept g T1 ctx p fuel ++ r.
Proof.
  intros g T1 T2 ctx fuel. induction fuel; intros p Hs; simpl.
  - exists []. reflexivity.
  - destruct (in_dec path_eq_dec (p ++ [g (ctx ++ p)]) T1) as [H1 | H1].
    + destruct (in_dec path_eq_dec (p ++ [g (ctx ++ p)]) T2) as [H2 | H2].
      * destruct (IHfuel (p ++ [g (ctx ++ p)]) Hs) as [r Hr]. exists r. rewrite Hr. reflexivity.
      * exfalso. apply H2, Hs, H1.
    + eexists. reflexivity.
Qed.

(* G1 (graft.md, Prop. 1), pointwise for every rule g and depth limit D. *)
Theorem walk_monotone : forall g T1 T2 ctx D, subtree T1 T2 ->
  length (accept g T1 ctx [] D) <= length (accept g T2 ctx [] D).
Proof.
  intros. destruct (walk_monotone_prefix g T1 T2 ctx D [] H) as [r Hr].
  rewrite Hr, app_length. lia.
Qed.

Corollary walk_emitted_monotone : forall g T1 T2 ctx D, subtree T1 T2 ->
  length (walk g T1 ctx D) <= length (walk g T2 ctx D).
Proof.
  intros. unfold walk. rewrite !app_length. pose proof (walk_monotone g T1 T2 ctx D H). simpl. lia.
Qed.

Local Open Scope Q_scope.

Definition qnat (n : nat) : Q := inject_Z (Z.of_nat n).

Lemma qnat_le : forall m n, (m <= n)%nat -> qnat m <= qnat n.
Proof. intros. unfold qnat, Qle. simpl. lia. Qed.

(* A finite law on target rules (at T > 0: on the joint per-path samples). *)
Definition rule_law := list (Q * (list nat -> nat)).

Definition law_nonneg (w : rule_law) : Prop := forall x, In x w -> 0 <= fst x.

(* Expected accepted length A(T). *)
Definition A (w : rule_law) (T : tree) (ctx : list nat) (D : nat) : Q :=
  qsum (fun x => fst x * qnat (length (accept (snd x) T ctx [] D))) w.

Theorem expected_walk_monotone : forall w T1 T2 ctx D, law_nonneg w -> subtree T1 T2 ->
  A w T1 ctx D <= A w T2 ctx D.
Proof.
  intros. unfold A. apply qsum_le. intros x Hx.
  rewrite !(Qmult_comm (fst x)). apply Qmult_le_compat_r; [|apply H; auto].
  apply qnat_le. apply walk_monotone. auto.
Qed.

(* ---------- G2: pruning loses, grafting cannot lose ---------- *)

Theorem pruning_loses : forall w T0 Tpi ctx D, law_nonneg w -> subtree Tpi T0 ->
  0 <= A w T0 ctx D - A w Tpi ctx D.
Proof.
  intros. pose proof (expected_walk_monotone w Tpi T0 ctx D H H0). lra.
Qed.

Lemma subtree_app_l : forall T G, subtree T (T ++ G).
Proof. intros T G u H. apply in_or_app. auto. Qed.

Theorem grafting_cannot_lose_pointwise : forall g Tpi G ctx D,
  (length (accept g Tpi ctx [] D) <= length (accept g (Tpi ++ G) ctx [] D))%nat.
Proof. intros. apply walk_monotone, subtree_app_l. Qed.

Theorem grafting_cannot_lose : forall w Tpi G ctx D, law_nonneg w ->
  A w Tpi ctx D <= A w (Tpi ++ G) ctx D.
Proof. intros. apply expected_walk_monotone; auto. apply subtree_app_l. Qed.

(* eq. (26): A_0 - A_g = R_pi - Gamma_g, with R_pi = A_0 - A_pi and Gamma_g = A_g - A_pi. *)
Theorem graft_identity_eq26 : forall w T0 Tpi G ctx D,
  let A0 := A w T0 ctx D in let Api := A w Tpi ctx D in let Ag := A w (Tpi ++ G) ctx D in
  A0 - Ag == (A0 - Api) - (Ag - Api).
Proof. intros. ring. Qed.

(* ---------- G3: coverage gain ---------- *)

Definition Cov (p : nat -> Q) (S : list nat) : Q := qsum p (nodup Nat.eq_dec S).

(* R \ S as a duplicate-free list. *)
Definition diff (R S : list nat) : list nat :=
  filter (fun x => if in_dec Nat.eq_dec x S then false else true) (nodup Nat.eq_dec R).

Lemma NoDup_app_disj : forall (l1 l2 : list nat), NoDup l1 -> NoDup l2 ->
  (forall x, In x l1 -> ~ In x l2) -> NoDup (l1 ++ l2).
Proof.
  induction l1; intros l2 N1 N2 Hd; simpl; auto.
  inversion N1; subst. constructor.
  - intro Hin. apply in_app_or in Hin. destruct Hin; [contradiction|]. apply (Hd a); simpl; auto.
  - apply IHl1; auto. intros x Hx. apply Hd. simpl; auto.
Qed.

Lemma union_perm : forall S R,
  Permutation (nodup Nat.eq_dec (S ++ R)) (nodup Nat.eq_dec S ++ diff R S).
Proof.
  intros. apply NoDup_Permutation.
  - apply NoDup_nodup.
  - apply NoDup_app_disj.
    + apply NoDup_nodup.
    + apply NoDup_filter, NoDup_nodup.
    + intros x H1 H2. unfold diff in H2. apply filter_In in H2. destruct H2 as [_ H2].
      apply nodup_In in H1. destruct (in_dec Nat.eq_dec x S); [discriminate | contradiction].
  - intros x. rewrite nodup_In. split; intros H.
    + apply in_app_or in H. apply in_or_app. destruct (in_dec Nat.eq_dec x S) as [HS | HS].
      * left. apply nodup_In. auto.
      * destruct H as [H | H]; [contradiction|]. right. unfold diff. apply filter_In.
        split; [apply nodup_In; auto|]. destruct (in_dec Nat.eq_dec x S); [contradiction|auto].
    + apply in_or_app. apply in_app_or in H. destruct H as [H | H].
      * left. apply nodup_In in H. auto.
      * right. unfold diff in H. apply filter_In in H. destruct H as [H _]. apply nodup_In in H. auto.
Qed.

(* G3 (graft.md, Prop. 3): Cov(S u R) - Cov(S) = sum_{x in R \ S} p(x). *)
Theorem coverage_gain : forall (p : nat -> Q) S R,
  Cov p (S ++ R) - Cov p S == qsum p (diff R S).
Proof.
  intros. unfold Cov. rewrite (qsum_perm _ p _ _ (union_perm S R)), qsum_app. ring.
Qed.

Theorem coverage_gain_nonneg : forall (p : nat -> Q) S R, (forall x, 0 <= p x) ->
  0 <= Cov p (S ++ R) - Cov p S.
Proof.
  intros. rewrite coverage_gain. apply qsum_nonneg. auto.
Qed.
