(* QSums.v -- finite sums over lists with rational values (helper library, no claim of
   proofs/README.md; used by GraftCoverage.v, DDTreeSurrogate.v, ChainRejection.v). *)

From Coq Require Import List Arith Lia QArith Lqa Permutation.
Import ListNotations.

Local Open Scope Q_scope.

Definition qsum {A : Type} (f : A -> Q) (l : list A) : Q :=
  fold_right (fun x acc => f x + acc) 0 l.

Lemma qsum_nil : forall A (f : A -> Q), qsum f [] == 0.
Proof. reflexivity. Qed.

Lemma qsum_cons : forall A (f : A -> Q) x l, qsum f (x :: l) == f x + qsum f l.
Proof. reflexivity. Qed.

Lemma qsum_app : forall A (f : A -> Q) l1 l2, qsum f (l1 ++ l2) == qsum f l1 + qsum f l2.
Proof.
  induction l1; intros; simpl; [ring|]. unfold qsum in *. simpl. rewrite IHl1. ring.
Qed.

Lemma qsum_ext : forall A (f g : A -> Q) l,
  (forall x, In x l -> f x == g x) -> qsum f l == qsum g l.
Proof.
  induction l; intros H; simpl; [reflexivity|]. unfold qsum in *. simpl.
  rewrite H by (left; auto). rewrite IHl by (intros; apply H; right; auto). reflexivity.
Qed.

Lemma qsum_plus : forall A (f g : A -> Q) l,
  qsum (fun x => f x + g x) l == qsum f l + qsum g l.
Proof.
  induction l; simpl; [ring|]. unfold qsum in *. simpl. rewrite IHl. ring.
Qed.

Lemma qsum_minus : forall A (f g : A -> Q) l,
  qsum (fun x => f x - g x) l == qsum f l - qsum g l.
Proof.
  induction l; simpl; [ring|]. unfold qsum in *. simpl. rewrite IHl. ring.
Qed.

Lemma qsum_scal_l : forall A (c : Q) (f : A -> Q) l,
  qsum (fun x => c * f x) l == c * qsum f l.
Proof.
  induction l; simpl; [ring|]. unfold qsum in *. simpl. rewrite IHl. ring.
Qed.

Lemma qsum_scal_r : forall A (c : Q) (f : A -> Q) l,
  qsum (fun x => f x * c) l == qsum f l * c.
Proof.
  induction l; simpl; [ring|]. unfold qsum in *. simpl. rewrite IHl. ring.
Qed.

Lemma qsum_zero : forall A (f : A -> Q) l, (forall x, In x l -> f x == 0) -> qsum f l == 0.
Proof.
  intros. rewrite (qsum_ext _ f (fun _ => 0)) by auto.
  induction l; simpl; [reflexivity|]. unfold qsum in *; simpl. rewrite IHl; [ring|].
  intros; apply H; right; auto.
Qed.

Lemma qsum_nonneg : forall A (f : A -> Q) l, (forall x, In x l -> 0 <= f x) -> 0 <= qsum f l.
Proof.
  induction l; intros H; simpl; [lra|]. unfold qsum in *; simpl.
  assert (0 <= f a) by (apply H; left; auto).
  assert (0 <= fold_right (fun x acc => f x + acc) 0 l) by (apply IHl; intros; apply H; right; auto).
  lra.
Qed.

Lemma qsum_le : forall A (f g : A -> Q) l,
  (forall x, In x l -> f x <= g x) -> qsum f l <= qsum g l.
Proof.
  induction l; intros H; simpl; [lra|]. unfold qsum in *; simpl.
  assert (f a <= g a) by (apply H; left; auto).
  assert (fold_right (fun x acc => f x + acc) 0 l <= fold_right (fun x acc => g x + acc) 0 l)
    by (apply IHl; intros; apply H; right; auto).
  lra.
Qed.

Lemma qsum_perm : forall A (f : A -> Q) l1 l2, Permutation l1 l2 -> qsum f l1 == qsum f l2.
Proof.
  intros A f l1 l2 P. induction P; unfold qsum in *; simpl.
  - reflexivity.
  - rewrite IHP. reflexivity.
  - ring.
  - rewrite IHP1, IHP2. reflexivity.
Qed.

Lemma qsum_map : forall A B (f : B -> Q) (h : A -> B) l, qsum f (map h l) == qsum (fun x => f (h x)) l.
Proof.
  induction l; simpl; [reflexivity|]. unfold qsum in *; simpl. rewrite IHl. reflexivity.
Qed.

Lemma qsum_flat_map : forall A B (f : B -> Q) (h : A -> list B) l,
  qsum f (flat_map h l) == qsum (fun x => qsum f (h x)) l.
Proof.
  induction l; simpl; [reflexivity|]. rewrite qsum_app. unfold qsum at 3; simpl.
  rewrite IHl. reflexivity.
Qed.

(* Exchange of two finite sums. *)
Lemma qsum_swap : forall A B (f : A -> B -> Q) (la : list A) (lb : list B),
  qsum (fun a => qsum (fun b => f a b) lb) la == qsum (fun b => qsum (fun a => f a b) la) lb.
Proof.
  induction la; intros.
  - change (qsum (fun a => qsum (fun b => f a b) lb) []) with 0.
    symmetry. apply qsum_zero. intros; reflexivity.
  - rewrite qsum_cons, IHla. symmetry.
    rewrite (qsum_ext _ _ (fun b => f a b + qsum (fun a0 => f a0 b) la));
      [apply qsum_plus | intros; reflexivity].
Qed.

(* Filtering = multiplying by an indicator. *)
Lemma qsum_filter : forall A (f : A -> Q) (P : A -> bool) l,
  qsum f (filter P l) == qsum (fun x => if P x then f x else 0) l.
Proof.
  induction l; simpl; [reflexivity|]. unfold qsum in *; simpl.
  destruct (P a); simpl; rewrite IHl; ring.
Qed.

(* Picking one element out of a duplicate-free list by an equality test. *)
Lemma qsum_pick_nat : forall (f : nat -> Q) a l, NoDup l -> In a l ->
  qsum (fun v => if Nat.eqb v a then f v else 0) l == f a.
Proof.
  intros f a l. revert a. induction l as [|b l IH]; intros a ND H; [destruct H|].
  inversion ND as [|? ? Hb ND']; subst. rewrite qsum_cons. destruct H as [<- | H].
  - rewrite Nat.eqb_refl. rewrite (qsum_zero _ _ l); [ring|].
    intros x Hx. destruct (Nat.eqb_spec x b); [subst; contradiction | reflexivity].
  - destruct (Nat.eqb_spec b a); [subst; contradiction|]. rewrite IH by auto. apply Qplus_0_l.
Qed.

Lemma qsum_const : forall A (c : Q) (l : list A),
  qsum (fun _ => c) l == c * inject_Z (Z.of_nat (length l)).
Proof.
  induction l; intros.
  - change (qsum (fun _ : A => c) []) with 0.
    change (inject_Z (Z.of_nat (length (@nil A)))) with 0. ring.
  - rewrite qsum_cons, IHl. cbn [length].
    rewrite Nat2Z.inj_succ. unfold Z.succ. rewrite inject_Z_plus. ring.
Qed.

Lemma qsum_nonneg_zero : forall A (f : A -> Q) l, (forall x, In x l -> 0 <= f x) ->
  qsum f l == 0 -> forall x, In x l -> f x == 0.
Proof.
  induction l as [|a l IH]; intros Hn Hs x Hx; [destruct Hx|]. rewrite qsum_cons in Hs.
  assert (0 <= f a) by (apply Hn; left; auto).
  assert (0 <= qsum f l) by (apply qsum_nonneg; intros; apply Hn; right; auto).
  destruct Hx as [<- | Hx]; [lra|]. apply IH; auto; [intros; apply Hn; right; auto | lra].
Qed.
