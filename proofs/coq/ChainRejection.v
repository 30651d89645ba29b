(* ChainRejection.v -- one step of chain rejection sampling is exact (row V4 of
   proofs/README.md; proofs/chain_rejection.md, "Lemma (one position)").

   Map to the rows of proofs/README.md:
   - V4 : chain_rejection_stream  (the whole stream: for every finite continuation s, the
                                   probability that the loop with chain rejection emits s
                                   next equals prod_i p(ctx, s_<i)(s_i), sequential sampling,
                                   whatever the drafter's laws q and the chain length K)
          chain_rejection_exact   (P(emit x) = q(x) min(1, p(x)/q(x)) + beta r(x) = p(x) for
                                   every token x of the vocabulary, including the case
                                   where the residual mass is 0)
          accept_prob_is_min      (q(x) min(1, p(x)/q(x)) = min(p(x), q(x)), also for q(x) = 0)
          reject_prob_is_residual_mass (beta = 1 - sum_y q(y) min(1, p(y)/q(y))
                                   = sum_y max(0, p(y) - q(y)))
          residual_zero_no_rejection (if the residual mass is 0 then p = q on the vocabulary
                                   and the rejection probability is 0)
          resample_from_p_exact_iff (the classic bug, resampling from p, emits
                                   min(p,q)(x) + beta p(x); it is exact iff
                                   min(p,q) = (1 - beta) p pointwise)
          resample_from_p_is_wrong (it is wrong at every x with 0 < p(x) <= q(x) when beta > 0)
          resample_from_p_exact_on_an_example (but not for every p <> q: p = (1,0),
                                   q = (1/2,1/2) is a counterexample to the remark's
                                   "whenever p <> q")

   Model / differences from the written statement:
   - exact rationals (Q) instead of float32; the vocabulary is any duplicate-free list vs of
     nat (e.g. seq 0 V); p, q : nat -> Q are non-negative on vs and each sums to 1 over vs;
   - the uniform variable U is not modelled: the probability of accepting a drawn x is
     min(1, p(x)/q(x)) by definition (P(U < c) = min(1, c) for U ~ Uniform[0,1), c >= 0),
     and the law of the emitted token is the formula below. In Q, p/0 = 0, so a token with
     q(x) = 0 (never drawn) contributes 0, as in the written proof;
   - the residual law is r = max(0, p - q) / beta, and r = p (the code's convention) when
     the residual mass beta is 0; the theorem covers both cases;
   - the stream theorem is stated on the recursion [stream_prob] (the probability of the next
     emitted tokens, splitting at each draft position into "accepted, the round goes on" and
     "rejected, resampled, a new round starts"), not on a probability space (none in the
     standard library): the drafter's law of the next draft is a function q ctx0 ctx of the
     round's start and of the text so far; a drafter whose law also depends on its own
     hidden randomness is a mixture of such functions, which this statement does not cover
     directly. *)

From Coq Require Import List Arith Lia QArith Lqa.
From Specjax Require Import QSums.
Import ListNotations.
Local Open Scope Q_scope.

Definition qmin (a b : Q) : Q := if Qle_bool a b then a else b.
Definition pos (a : Q) : Q := if Qle_bool a 0 then 0 else a.   (* max(0, a) *)

Lemma qmin_spec : forall a b, (a <= b /\ qmin a b = a) \/ (b < a /\ qmin a b = b).
Proof.
  intros. unfold qmin. destruct (Qle_bool a b) eqn:E.
  - left. split; auto. apply Qle_bool_iff. auto.
  - right. split; auto. apply Qnot_le_lt. intro H. apply Qle_bool_iff in H. congruence.
Qed.

Lemma pos_spec : forall a, (a <= 0 /\ pos a = 0) \/ (0 < a /\ pos a = a).
Proof.
  intros. unfold pos. destruct (Qle_bool a 0) eqn:E.
  - left. split; auto. apply Qle_bool_iff. auto.
  - right. split; auto. apply Qnot_le_lt. intro H. apply Qle_bool_iff in H. congruence.
Qed.

Lemma pos_nonneg : forall a, 0 <= pos a.
Proof. intros. destruct (pos_spec a) as [[_ ->] | [H ->]]; lra. Qed.

Lemma min_plus_pos : forall a b, qmin a b + pos (a - b) == a.
Proof.
  intros. destruct (qmin_spec a b) as [[H ->] | [H ->]];
    destruct (pos_spec (a - b)) as [[H' ->] | [H' ->]]; lra.
Qed.

(* Probability that the draft is x and is accepted. *)
Definition accept_prob (p q : nat -> Q) (x : nat) : Q := q x * qmin 1 (p x / q x).

Definition residual_mass (vs : list nat) (p q : nat -> Q) : Q := qsum (fun y => pos (p y - q y)) vs.

Definition reject_prob (vs : list nat) (p q : nat -> Q) : Q := 1 - qsum (accept_prob p q) vs.

(* The resampling law, with the code's convention r = p when the residual mass is 0. *)
Definition residual (vs : list nat) (p q : nat -> Q) (x : nat) : Q :=
  if Qeq_bool (residual_mass vs p q) 0 then p x else pos (p x - q x) / residual_mass vs p q.

Definition emit_prob (vs : list nat) (p q : nat -> Q) (x : nat) : Q :=
  accept_prob p q x + reject_prob vs p q * residual vs p q x.

Definition distribution (vs : list nat) (p : nat -> Q) : Prop :=
  (forall x, In x vs -> 0 <= p x) /\ qsum p vs == 1.

Lemma accept_prob_is_min : forall p q x, 0 <= p x -> 0 <= q x ->
  accept_prob p q x == qmin (p x) (q x).
Proof.
  intros p q x Hp Hq. unfold accept_prob.
  destruct (Qeq_dec (q x) 0) as [Z | NZ].
  - assert (L : q x * qmin 1 (p x / q x) == 0).
    { set (c := qmin 1 (p x / q x)). rewrite Z. ring. }
    rewrite L. destruct (qmin_spec (p x) (q x)) as [[H ->] | [H ->]]; lra.
  - assert (Hq' : 0 < q x) by (apply Qle_lt_or_eq in Hq; destruct Hq; [auto | symmetry in H; contradiction]).
    assert (Hd : p x / q x * q x == p x) by (field; auto).
    destruct (qmin_spec 1 (p x / q x)) as [[H ->] | [H ->]].
    + assert (1 * q x <= p x / q x * q x) by (apply Qmult_le_compat_r; lra).
      destruct (qmin_spec (p x) (q x)) as [[H' ->] | [H' ->]]; lra.
    + assert (p x / q x * q x < 1 * q x) by (apply Qmult_lt_compat_r; lra).
      destruct (qmin_spec (p x) (q x)) as [[H' ->] | [H' ->]]; [|lra].
      rewrite Qmult_comm. exact Hd.
Qed.

Theorem reject_prob_is_residual_mass : forall vs p q, distribution vs p -> distribution vs q ->
  reject_prob vs p q == residual_mass vs p q.
Proof.
  intros vs p q [Hp Sp] [Hq Sq]. unfold reject_prob, residual_mass.
  rewrite (qsum_ext _ (accept_prob p q) (fun x => qmin (p x) (q x)))
    by (intros; apply accept_prob_is_min; auto).
  assert (E : qsum (fun x => qmin (p x) (q x)) vs + qsum (fun y => pos (p y - q y)) vs == qsum p vs).
  { rewrite <- qsum_plus. apply qsum_ext. intros. apply min_plus_pos. }
  lra.
Qed.

Theorem residual_zero_no_rejection : forall vs p q, distribution vs p -> distribution vs q ->
  residual_mass vs p q == 0 ->
  reject_prob vs p q == 0 /\ forall x, In x vs -> p x == q x.
Proof.
  intros vs p q Dp Dq H0. split.
  - rewrite reject_prob_is_residual_mass; auto.
  - intros x Hx.
    assert (Z : forall y, In y vs -> pos (p y - q y) == 0).
    { apply qsum_nonneg_zero; [intros; apply pos_nonneg | exact H0]. }
    (* p <= q everywhere, and both sum to 1, so p = q *)
    assert (Le : forall y, In y vs -> p y <= q y).
    { intros y Hy. specialize (Z y Hy). destruct (pos_spec (p y - q y)) as [[H _] | [H E]]; [lra|].
      rewrite E in Z. lra. }
    destruct Dp as [_ Sp]. destruct Dq as [_ Sq].
    assert (S0 : qsum (fun y => q y - p y) vs == 0) by (rewrite (qsum_minus _ q p); lra).
    assert (Each := qsum_nonneg_zero _ (fun y => q y - p y) vs
                      (fun y Hy => ltac:(specialize (Le y Hy); cbv beta; lra)) S0 x Hx).
    simpl in Each. lra.
Qed.

(* V4, one position: the emitted token has law p. *)
Theorem chain_rejection_exact : forall vs p q, distribution vs p -> distribution vs q ->
  forall x, In x vs -> emit_prob vs p q x == p x.
Proof.
  intros vs p q Dp Dq x Hx.
  pose proof Dp as [Hp Sp]. pose proof Dq as [Hq Sq].
  unfold emit_prob. rewrite accept_prob_is_min by auto.
  rewrite reject_prob_is_residual_mass by auto.
  unfold residual. destruct (Qeq_bool (residual_mass vs p q) 0) eqn:E.
  - apply Qeq_bool_iff in E. rewrite E.
    destruct (residual_zero_no_rejection vs p q Dp Dq E) as [_ Eq].
    specialize (Eq x Hx).
    destruct (qmin_spec (p x) (q x)) as [[H ->] | [H ->]]; lra.
  - assert (NZ : ~ residual_mass vs p q == 0) by (intro H; apply Qeq_bool_iff in H; congruence).
    rewrite <- (min_plus_pos (p x) (q x)) at 3. field. exact NZ.
Qed.

(* The classic bug (chain_rejection.md, Remarks): resampling from p instead of the residual
   gives min(p, q)(x) + beta p(x). It equals p(x) exactly when min(p(x), q(x)) = (1 - beta) p(x). *)
Definition bug_emit_prob (vs : list nat) (p q : nat -> Q) (x : nat) : Q :=
  accept_prob p q x + reject_prob vs p q * p x.

Theorem resample_from_p_exact_iff : forall vs p q, distribution vs p -> distribution vs q ->
  forall x, In x vs ->
  (bug_emit_prob vs p q x == p x <-> qmin (p x) (q x) == (1 - reject_prob vs p q) * p x).
Proof.
  intros vs p q [Hp Sp] [Hq Sq] x Hx. unfold bug_emit_prob.
  rewrite accept_prob_is_min by auto. split; intro H; lra.
Qed.

(* Hence the bug is detected only for some (p, q): it is wrong e.g. as soon as some token has
   0 < p(x) <= q(x) and beta > 0, ... *)
Theorem resample_from_p_is_wrong : forall vs p q, distribution vs p -> distribution vs q ->
  forall x, In x vs -> 0 < p x -> p x <= q x -> 0 < residual_mass vs p q ->
  ~ bug_emit_prob vs p q x == p x.
Proof.
  intros vs p q Dp Dq x Hx Hpos Hle Hm E.
  pose proof Dp as [Hp Sp]. pose proof Dq as [Hq Sq].
  unfold bug_emit_prob in E. rewrite accept_prob_is_min in E by auto.
  rewrite reject_prob_is_residual_mass in E by auto.
  destruct (qmin_spec (p x) (q x)) as [[H Hmin] | [H Hmin]]; [|lra]. rewrite Hmin in E.
  assert (0 < residual_mass vs p q * p x) by (apply Qmult_lt_0_compat; auto). lra.
Qed.

(* ... but NOT for every p <> q, contrary to the wording "whenever p <> q" of
   chain_rejection.md's remark: with p = (1, 0) and q = (1/2, 1/2) the buggy sampler happens
   to be exact. *)
Definition ex_p (x : nat) : Q := if Nat.eqb x 0 then 1 else 0.
Definition ex_q (x : nat) : Q := 1 # 2.

Theorem resample_from_p_exact_on_an_example :
  distribution [0; 1]%nat ex_p /\ distribution [0; 1]%nat ex_q /\ (~ ex_p 1%nat == ex_q 1%nat) /\
  (forall x, In x [0; 1]%nat -> bug_emit_prob [0; 1]%nat ex_p ex_q x == ex_p x).
Proof.
  split; [split; [intros x [<- | [<- | []]]; unfold ex_p; simpl; lra | reflexivity]|].
  split; [split; [intros x _; unfold ex_q; lra | reflexivity]|].
  split; [unfold ex_p, ex_q; simpl; intro H; inversion H|].
  intros x [<- | [<- | []]]; reflexivity.
Qed.

(* ---------- the whole stream (chain_rejection.md, Theorem) ---------- *)

(* Probability that the speculative loop with chain rejection emits the tokens s next, from
   committed text ctx, inside a round that started at ctx0 and still has k draft positions.
   At a draft position the emitted token is the accepted draft (the round goes on) or the
   resample (the round ends and a new one starts with K drafts); with no draft left (k = 0)
   it is the bonus, drawn from p, and a new round starts. The drafter's law of the next draft
   token is q ctx0 ctx: any function of the round's start and of the text so far, i.e. of
   the committed past and the drafts already accepted. p c is the target's law after c. *)
Fixpoint stream_prob (vs : list nat) (p : list nat -> nat -> Q) (q : list nat -> list nat -> nat -> Q)
    (K : nat) (ctx0 ctx : list nat) (k : nat) (s : list nat) : Q :=
  match s with
  | [] => 1
  | x :: s' =>
      match k with
      | O => p ctx x * stream_prob vs p q K (ctx ++ [x]) (ctx ++ [x]) K s'
      | S k' =>
          accept_prob (p ctx) (q ctx0 ctx) x * stream_prob vs p q K ctx0 (ctx ++ [x]) k' s'
          + reject_prob vs (p ctx) (q ctx0 ctx) * residual vs (p ctx) (q ctx0 ctx) x
            * stream_prob vs p q K (ctx ++ [x]) (ctx ++ [x]) K s'
      end
  end.

(* Sequential sampling from the target: prod_i p(ctx, s_<i)(s_i). *)
Fixpoint seq_prob (p : list nat -> nat -> Q) (ctx : list nat) (s : list nat) : Q :=
  match s with
  | [] => 1
  | x :: s' => p ctx x * seq_prob p (ctx ++ [x]) s'
  end.

(* V4, the stream: every finite continuation has the law of sequential sampling, whatever
   the drafter's laws q (as long as they are the laws the drafts are drawn from). *)
Theorem chain_rejection_stream : forall vs p q K,
  (forall c, distribution vs (p c)) -> (forall c0 c, distribution vs (q c0 c)) ->
  forall s ctx0 ctx k, Forall (fun x => In x vs) s ->
  stream_prob vs p q K ctx0 ctx k s == seq_prob p ctx s.
Proof.
  intros vs p q K Dp Dq s. induction s as [|x s IH]; intros ctx0 ctx k Hs; [reflexivity|].
  inversion Hs as [|? ? Hx Hs']; subst. cbn [stream_prob seq_prob].
  destruct k as [|k].
  - rewrite IH by auto. reflexivity.
  - rewrite !IH by auto.
    pose proof (chain_rejection_exact vs (p ctx) (q ctx0 ctx) (Dp ctx) (Dq ctx0 ctx) x Hx) as E.
    unfold emit_prob in E. rewrite <- E. ring.
Qed.
