(* WalkSurrogate.v -- DD1 as DD8 with p := q (issue 50, item 5).

   Map to the rows of proofs/README.md:
   - DD1 : walk_expected_accepted_q   (DD8's walk_expected_accepted for a target whose law at
                                       depth d below the root is the drafter's marginal q_d,
                                       whatever the context: one sampling-walk round accepts on
                                       average sum_{u in T, |u| <= D} q(u), q(u) = prod_d q_d(u_d),
                                       the surrogate of DDTree Proposition 1)
           walk_expected_accepted_q_full (= sum_{u in T} q(u) when D >= the depth of T:
                                       DDTree's max_depth = L)
           seq_prob_q                 (under that target, the path probability p(u) of DD8 is
                                       the drafter's product q(u))

   Model: SamplingWalk.v's (samples per slot, exact rationals, probabilities as finite sums
   over assignments) with p c := q (|c| - |ctx| + 1): the target's next-token law depends only
   on the depth below the root. q_d must be a distribution over vs at every depth d (rows past
   the block depth L are never reached by nodes of depth <= L but enter the model's samples at
   the leaves; any distribution will do there). *)

From Coq Require Import List Arith Lia QArith Lqa.
From Specjax Require Import QSums DDTreeSurrogate ChainRejection SamplingWalk.
Import ListNotations.

Local Open Scope Q_scope.

(* The product-law target: after ctx ++ w, the next token has law q_(|w|+1). *)
Definition depth_law (q : nat -> nat -> Q) (ctx : list nat) : list nat -> nat -> Q :=
  fun c => q (S (length c - length ctx)).

Lemma seq_prob_q_from : forall q ctx u w,
  seq_prob (depth_law q ctx) (ctx ++ w) u == qprod q (S (length w)) u.
Proof.
  intros q ctx u; induction u as [|x u IH]; intros w; simpl; [reflexivity|].
  unfold depth_law at 1. rewrite app_length.
  replace (length ctx + length w - length ctx)%nat with (length w) by lia.
  rewrite <- app_assoc, IH, app_length. simpl.
  replace (length w + 1)%nat with (S (length w)) by lia. reflexivity.
Qed.

Theorem seq_prob_q : forall q ctx u, seq_prob (depth_law q ctx) ctx u == qp q u.
Proof.
  intros. pose proof (seq_prob_q_from q ctx u []) as H. rewrite app_nil_r in H. exact H.
Qed.

(* DD1 as DD8 with p := q: if the target's law at depth d is the drafter's q_d, one round of
   the sampling walk accepts on average the surrogate sum_{u in T, |u| <= D} q(u). *)
Theorem walk_expected_accepted_q : forall vs q T D ctx,
  NoDup vs -> (forall d, distribution vs (q d)) ->
  NoDup T -> ~ In [] T -> prefix_closed T -> (forall u, In u T -> Forall (fun x => In x vs) u) ->
  round_exp vs (depth_law q ctx) T D ctx (fun e => inject_Z (Z.of_nat (length e - 1)))
  == qsum (fun u => if Nat.leb (length u) D then qp q u else 0) T.
Proof.
  intros vs q T D ctx Nv Dq NT Hr HT Hv.
  rewrite (walk_expected_accepted vs (depth_law q ctx) T D ctx Nv) by (auto; intro c; apply Dq).
  apply qsum_ext. intros u _. destruct (Nat.leb (length u) D); [apply seq_prob_q | reflexivity].
Qed.

(* With D >= the depth of T (specjax's max_depth = L for DDTree): exactly sum_{u in T} q(u). *)
Corollary walk_expected_accepted_q_full : forall vs q T D ctx,
  NoDup vs -> (forall d, distribution vs (q d)) ->
  NoDup T -> ~ In [] T -> prefix_closed T -> (forall u, In u T -> Forall (fun x => In x vs) u) ->
  (forall u, In u T -> (length u <= D)%nat) ->
  round_exp vs (depth_law q ctx) T D ctx (fun e => inject_Z (Z.of_nat (length e - 1)))
  == qsum (qp q) T.
Proof.
  intros vs q T D ctx Nv Dq NT Hr HT Hv HD.
  rewrite (walk_expected_accepted_full vs (depth_law q ctx) T D ctx Nv) by (auto; intro c; apply Dq).
  apply qsum_ext. intros u _. apply seq_prob_q.
Qed.
