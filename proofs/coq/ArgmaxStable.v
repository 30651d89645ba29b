(* ArgmaxStable.v -- argmax stability under bounded logit error (V6, issue 50).

   Map to the rows of proofs/README.md:
   - V6  : argmax_spec               (argmax_upto is specjax.ops.argmax: the smallest index
                                      attaining the maximum)
           argmax_stable             (|a_i - b_i| <= delta for every i and b's top-2 margin
                                      > 2 delta  =>  argmax a = argmax b)
           argmax_flip_margin        (whatever a delta-close a picks, b's value there is within
                                      2 delta of b's maximum: a flip needs a top-2 margin <= 2 delta)
           first_divergence_near_tie (the first position where a run that takes the argmax of
                                      delta-close logits departs from greedy decoding is a
                                      position where greedy's top-2 margin is <= 2 delta)
           no_near_tie_identical     (if greedy's top-2 margin is > 2 delta at every position,
                                      the run emits exactly the greedy tokens)

   Model: exact rationals. A logit vector is a function a : nat -> Q read on the indices
   0..n (a vocabulary of n + 1 tokens); argmax_upto a n is the first index attaining the
   maximum (specjax.ops.argmax: the max, then the smallest index equal to it; NaN is not
   modelled). The greedy target is GreedyWalk.greedy with g c = argmax_upto (Lb c) n, Lb the
   AR run's logits after the sequence c. The speculative run is any sequence s whose k-th token
   is argmax_upto (A k) n for some vector A k that is delta-close to Lb (ctx ++ s_<k): the
   logits it computed for that position, by whatever reduction order. delta is a hypothesis
   (specjax.equality measures c u s for it; it is not derived from a float model here). *)

From Coq Require Import List Arith Lia QArith Qabs Lqa.
From Specjax Require Import GreedyWalk.
Import ListNotations.

Local Open Scope Q_scope.

(* First index of the maximum of a on 0..n. *)
Fixpoint argmax_upto (a : nat -> Q) (n : nat) : nat :=
  match n with
  | O => O
  | S m => let i := argmax_upto a m in if Qlt_le_dec (a i) (a (S m)) then S m else i
  end.

Lemma argmax_le : forall a n, (argmax_upto a n <= n)%nat.
Proof.
  induction n; simpl; [lia|].
  destruct (Qlt_le_dec _ _); lia.
Qed.

Lemma argmax_max : forall a n j, (j <= n)%nat -> a j <= a (argmax_upto a n).
Proof.
  induction n; intros j Hj; simpl.
  - replace j with O by lia. apply Qle_refl.
  - destruct (Qlt_le_dec (a (argmax_upto a n)) (a (S n))) as [Hlt | Hle].
    + destruct (Nat.eq_dec j (S n)) as [-> | Hne]; [apply Qle_refl|].
      apply Qle_trans with (a (argmax_upto a n)); [apply IHn; lia | apply Qlt_le_weak; exact Hlt].
    + destruct (Nat.eq_dec j (S n)) as [-> | Hne]; [exact Hle|]. apply IHn; lia.
Qed.

Lemma argmax_first : forall a n j, (j < argmax_upto a n)%nat -> a j < a (argmax_upto a n).
Proof.
  induction n; intros j Hj; simpl in *; [lia|].
  destruct (Qlt_le_dec (a (argmax_upto a n)) (a (S n))) as [Hlt | Hle].
  - apply Qle_lt_trans with (a (argmax_upto a n)); [apply argmax_max; lia | exact Hlt].
  - apply IHn; exact Hj.
Qed.

(* argmax_upto is the smallest index attaining the maximum (specjax.ops.argmax). *)
Theorem argmax_spec : forall a n i,
  argmax_upto a n = i <->
  ((i <= n)%nat /\ (forall j, (j <= n)%nat -> a j <= a i) /\ (forall j, (j < i)%nat -> a j < a i)).
Proof.
  intros a n i; split.
  - intros <-. split; [apply argmax_le|]. split; [apply argmax_max | apply argmax_first].
  - intros (Hi & Hmax & Hfirst).
    destruct (lt_eq_lt_dec i (argmax_upto a n)) as [[Hlt | Heq] | Hgt]; [| symmetry; exact Heq |].
    + exfalso. pose proof (argmax_first a n i Hlt) as H1.
      pose proof (Hmax (argmax_upto a n) (argmax_le a n)). lra.
    + exfalso. pose proof (Hfirst (argmax_upto a n) Hgt) as H1. pose proof (argmax_max a n i Hi). lra.
Qed.

(* A strict unique maximum is the argmax. *)
Lemma argmax_unique : forall a n i,
  (i <= n)%nat -> (forall j, (j <= n)%nat -> j <> i -> a j < a i) -> argmax_upto a n = i.
Proof.
  intros a n i Hi H. apply argmax_spec. split; [exact Hi|]. split.
  - intros j Hj. destruct (Nat.eq_dec j i) as [-> | Hne]; [apply Qle_refl | apply Qlt_le_weak, H; auto].
  - intros j Hj. apply H; lia.
Qed.

(* V6, the stability step: if a is delta-close to b entrywise and b's top-2 margin exceeds
   2 delta (every other entry is more than 2 delta below b's maximum), a has the same argmax. *)
Theorem argmax_stable : forall (a b : nat -> Q) n delta,
  (forall i, (i <= n)%nat -> Qabs (a i - b i) <= delta) ->
  (forall j, (j <= n)%nat -> j <> argmax_upto b n -> b j + 2 * delta < b (argmax_upto b n)) ->
  argmax_upto a n = argmax_upto b n.
Proof.
  intros a b n delta Hclose Hmargin.
  apply argmax_unique; [apply argmax_le|].
  intros j Hj Hne.
  pose proof (Hclose j Hj) as Hj'. pose proof (Hclose (argmax_upto b n) (argmax_le b n)) as Hi'.
  apply Qabs_Qle_condition in Hj'. apply Qabs_Qle_condition in Hi'.
  pose proof (Hmargin j Hj Hne). lra.
Qed.

(* The contrapositive, without case analysis: the index a picks is within 2 delta of b's
   maximum. So if it is not b's argmax, b's top-2 margin is <= 2 delta. *)
Corollary argmax_flip_margin : forall (a b : nat -> Q) n delta,
  (forall i, (i <= n)%nat -> Qabs (a i - b i) <= delta) ->
  b (argmax_upto b n) - b (argmax_upto a n) <= 2 * delta.
Proof.
  intros a b n delta Hclose.
  pose proof (Hclose _ (argmax_le a n)) as Ha. pose proof (Hclose _ (argmax_le b n)) as Hb.
  apply Qabs_Qle_condition in Ha. apply Qabs_Qle_condition in Hb.
  pose proof (argmax_max a n (argmax_upto b n) (argmax_le b n)). lra.
Qed.

Lemma firstn_S_nth : forall (s : list nat) k, (k < length s)%nat ->
  firstn (S k) s = firstn k s ++ [nth k s O].
Proof.
  induction s as [|x s IH]; intros k Hk; simpl in *; [lia|].
  destruct k; simpl; [reflexivity|]. f_equal. apply IH. lia.
Qed.

(* The run: token k of s is the argmax of a vector A k that is delta-close to AR's logits
   after ctx ++ s_<k. *)
Definition delta_close_run (A : nat -> nat -> Q) (Lb : list nat -> nat -> Q) n delta
    (ctx s : list nat) : Prop :=
  forall k, (k < length s)%nat ->
    nth k s O = argmax_upto (A k) n /\
    forall i, (i <= n)%nat -> Qabs (A k i - Lb (ctx ++ firstn k s) i) <= delta.

(* V6: at the first position k where such a run departs from greedy decoding (AR), AR's
   top-2 margin at that position is <= 2 delta: the token the run chose is another index
   within 2 delta of AR's maximum. *)
Theorem first_divergence_near_tie : forall A Lb n delta ctx s k,
  delta_close_run A Lb n delta ctx s ->
  (k < length s)%nat ->
  let gb := fun c => argmax_upto (Lb c) n in
  firstn k s = greedy gb ctx k ->
  nth k s O <> gb (ctx ++ greedy gb ctx k) ->
  let c := ctx ++ greedy gb ctx k in
  exists j, (j <= n)%nat /\ j <> gb c /\ Lb c (gb c) - Lb c j <= 2 * delta.
Proof.
  intros A Lb n delta ctx s k Hrun Hk gb Hpre Hdiff c.
  destruct (Hrun k Hk) as [Htok Hclose].
  rewrite Hpre in Hclose. fold c in Hclose.
  exists (argmax_upto (A k) n). split; [apply argmax_le|]. split.
  - rewrite <- Htok. exact Hdiff.
  - apply argmax_flip_margin. exact Hclose.
Qed.

(* V6, the positive form: if AR's top-2 margin exceeds 2 delta at every position of its own
   rollout, the run emits exactly AR's tokens. *)
Theorem no_near_tie_identical : forall A Lb n delta ctx s,
  delta_close_run A Lb n delta ctx s ->
  let gb := fun c => argmax_upto (Lb c) n in
  (forall k, (k < length s)%nat -> forall j, (j <= n)%nat ->
     let c := ctx ++ greedy gb ctx k in j <> gb c -> Lb c j + 2 * delta < Lb c (gb c)) ->
  s = greedy gb ctx (length s).
Proof.
  intros A Lb n delta ctx s Hrun gb Hmargin.
  assert (H : forall k, (k <= length s)%nat -> firstn k s = greedy gb ctx k).
  { induction k as [|k IH]; intros Hk; [reflexivity|].
    rewrite firstn_S_nth by lia. rewrite greedy_snoc, <- IH by lia. f_equal.
    destruct (Hrun k ltac:(lia)) as [Htok Hclose]. rewrite Htok.
    rewrite (IH ltac:(lia)) in Hclose. rewrite (IH ltac:(lia)).
    unfold gb at 1; f_equal; apply (argmax_stable _ _ n delta); [exact Hclose|].
    intros j Hj Hne. apply (Hmargin k ltac:(lia) j Hj Hne). }
  rewrite <- (H (length s) (le_n _)), firstn_all. reflexivity.
Qed.
