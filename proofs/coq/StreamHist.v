(* StreamHist.v -- the stream laws for drafters with memory (V3, V4; issue 50).

   Map to the rows of proofs/README.md:
   - V3  : sampling_walk_stream_hist (SamplingWalk.sampling_walk_stream with a drafter that is
                                      a state machine: the law of its next tree may depend on a
                                      state that it updates after every round from the old
                                      state, the committed text, the tree it proposed and the
                                      verifier's samples at every slot -- rejected nodes
                                      included -- hence on any function of the target's law at
                                      every slot (its top-k) and on where past rounds ended;
                                      the stream is still the law of sequential sampling)
           walk_stream_hist_memoryless (SamplingWalk's walk_stream is the instance St := unit)
   - V4  : chain_rejection_stream_hist (ChainRejection.chain_rejection_stream with a drafter
                                      state updated after every emitted token from the old
                                      state, the text, the token and how it was emitted
                                      (accepted draft / resample after a rejection / bonus):
                                      the draft law q st ctx at each position may depend on
                                      the whole history; the stream is still sequential
                                      sampling's law)
           chain_stream_hist_memoryless (chain_rejection_stream's drafter q ctx0 ctx is the
                                      instance St := list nat, the round's start)

   Model: SamplingWalk.v's (exact rationals; one target sample per slot, independent given the
   tree; a probability is the finite sum over all assignments of samples to slots). The
   drafter: a type St of states (any type: a retrieval table, a cache, the whole history), a
   finite law draft st ctx over pairs (tree, state after proposing) (weights summing to 1;
   the drafter's own randomness is this mixture, and may enter the state as well as the
   tree), and an update upd st' ctx T a, any function of that state, the committed text, the
   proposed tree and the assignment a of samples to the tree's slots. The target
   law p is fixed, so anything computed from p at the tree's slots (logits, top-k) is a
   function of (ctx, T) and may enter upd. Not covered: a state that depends on randomness
   other than the drafter's mixture and the verifier's samples.
   For V4 (ChainRejection.v's model: exact rationals, acceptance probability min(1, p/q) taken
   as given, the stream law a finite recursion) the update sees the emitted token and its
   kind, not the rejected draft token itself (that draw is marginalised in the recursion, as
   in chain_rejection_stream). *)

From Coq Require Import List Arith Lia QArith Lqa.
From Specjax Require Import QSums GreedyWalk ChainRejection SamplingWalk.
Import ListNotations.

Local Open Scope Q_scope.

(* P(the stream starts with y), within n rounds, from drafter state st and text ctx. The
   drafter's proposal is a finite law over pairs (tree, state after proposing): its own
   randomness may enter both (specjax's propose returns the tree and the new state from one
   key); after the verifier's samples a, the state is upd st' ctx T a. *)
Fixpoint walk_stream_hist {St : Type} (vs : list nat) (p : list nat -> nat -> Q)
    (draft : St -> list nat -> list (Q * (tree * St))) (upd : St -> list nat -> tree -> assignment -> St)
    (D : nat) (n : nat) (st : St) (ctx y : list nat) : Q :=
  match n with
  | O => 1
  | S n' =>
      match y with
      | [] => 1
      | _ :: _ =>
          qsum (fun wT => fst wT *
            qsum (fun a => weight p ctx a *
                    (if prefixb (SamplingWalk.walk (fst (snd wT)) a D []) y
                     then walk_stream_hist vs p draft upd D n' (upd (snd (snd wT)) ctx (fst (snd wT)) a)
                            (ctx ++ SamplingWalk.walk (fst (snd wT)) a D [])
                            (skipn (length (SamplingWalk.walk (fst (snd wT)) a D [])) y)
                     else if prefixb y (SamplingWalk.walk (fst (snd wT)) a D []) then 1 else 0))
                 (assignments vs (nodes (fst (snd wT)))))
            (draft st ctx)
      end
  end.

Lemma walk_nonempty : forall T a f u, (1 <= length (SamplingWalk.walk T a f u))%nat.
Proof.
  intros T a f u. destruct f; simpl; [lia|]. destruct (in_dec _ _ _); simpl; lia.
Qed.

(* V3 for drafters with memory: for every finite y, every initial state and text, the first
   |y| emitted tokens are y with probability prod_i p(ctx, y_<i)(y_i). *)
Theorem sampling_walk_stream_hist : forall (St : Type) vs p draft upd D,
  NoDup vs -> (forall c, distribution vs (p c)) -> (forall (st : St) c, qsum fst (draft st c) == 1) ->
  forall n st ctx y, (length y <= n)%nat -> Forall (fun x => In x vs) y ->
  walk_stream_hist vs p draft upd D n st ctx y == seq_prob p ctx y.
Proof.
  intros St vs p draft upd D Nv Dp Dd. induction n as [|n IH]; intros st ctx y Hn Fy.
  - destruct y; [reflexivity | simpl in Hn; lia].
  - destruct y as [|z y']; [reflexivity|]. cbn [walk_stream_hist].
    set (y := z :: y') in *.
    rewrite (qsum_ext _ _ (fun wT => fst wT * seq_prob p ctx y)).
    { rewrite qsum_scal_r, Dd. ring. }
    intros [w [T st']] _. cbn [fst snd]. apply Qmult_comp; [reflexivity|].
    transitivity (round_exp vs p T D ctx (fun e => cover p ctx e y)).
    { unfold round_exp. apply qsum_ext. intros a _. apply Qmult_comp; [reflexivity|].
      unfold cover. destruct (prefixb (SamplingWalk.walk T a D []) y) eqn:Hp; [|reflexivity].
      apply IH.
      - rewrite skipn_length. pose proof (walk_nonempty T a D []). lia.
      - apply Forall_skipn. exact Fy. }
    rewrite sampling_walk_expectation by auto.
    apply ems_cover; auto.
Qed.

(* The memoryless drafter of SamplingWalk.v is the instance St := unit. *)
Corollary walk_stream_hist_memoryless : forall vs p (draft : list nat -> list (Q * tree)) D n ctx y,
  walk_stream_hist vs p (fun (_ : unit) c => map (fun wT => (fst wT, (snd wT, tt))) (draft c))
    (fun _ _ _ _ => tt) D n tt ctx y
  == walk_stream vs p draft D n ctx y.
Proof.
  intros vs p draft D n. induction n as [|n IH]; intros ctx y; [reflexivity|].
  destruct y as [|z y]; [reflexivity|]. cbn [walk_stream_hist walk_stream].
  rewrite qsum_map. apply qsum_ext. intros wT _. cbn [fst snd]. apply Qmult_comp; [reflexivity|].
  apply qsum_ext. intros a _. apply Qmult_comp; [reflexivity|].
  destruct (prefixb (SamplingWalk.walk (snd wT) a D []) (z :: y)); [apply IH | reflexivity].
Qed.

(* ---------- V4: chain rejection with a drafter state ---------- *)

(* How a token was emitted: the accepted draft, the resample after a rejection, the bonus. *)
Inductive emit_kind := accepted | resampled | bonus.

(* stream_prob with the drafter's laws q st ctx read from a state st, updated after every
   emitted token x by upd st ctx x kind. k draft positions are left in the round. *)
Fixpoint stream_prob_hist {St : Type} (vs : list nat) (p : list nat -> nat -> Q)
    (q : St -> list nat -> nat -> Q) (upd : St -> list nat -> nat -> emit_kind -> St)
    (K : nat) (st : St) (ctx : list nat) (k : nat) (s : list nat) : Q :=
  match s with
  | [] => 1
  | x :: s' =>
      match k with
      | O => p ctx x * stream_prob_hist vs p q upd K (upd st ctx x bonus) (ctx ++ [x]) K s'
      | S k' =>
          accept_prob (p ctx) (q st ctx) x
            * stream_prob_hist vs p q upd K (upd st ctx x accepted) (ctx ++ [x]) k' s'
          + reject_prob vs (p ctx) (q st ctx) * residual vs (p ctx) (q st ctx) x
            * stream_prob_hist vs p q upd K (upd st ctx x resampled) (ctx ++ [x]) K s'
      end
  end.

(* V4 for drafters with memory: whatever the state and its updates, every finite
   continuation has the law of sequential sampling, provided each q st ctx is the law the
   draft at that position is drawn from. *)
Theorem chain_rejection_stream_hist : forall (St : Type) vs p q upd K,
  (forall c, distribution vs (p c)) -> (forall (st : St) c, distribution vs (q st c)) ->
  forall s st ctx k, Forall (fun x => In x vs) s ->
  stream_prob_hist vs p q upd K st ctx k s == seq_prob p ctx s.
Proof.
  intros St vs p q upd K Dp Dq s. induction s as [|x s IH]; intros st ctx k Hs; [reflexivity|].
  inversion Hs as [|? ? Hx Hs']; subst. cbn [stream_prob_hist seq_prob].
  destruct k as [|k].
  - rewrite IH by auto. reflexivity.
  - rewrite !IH by auto.
    pose proof (chain_rejection_exact vs (p ctx) (q st ctx) (Dp ctx) (Dq st ctx) x Hx) as E.
    unfold emit_prob in E. rewrite <- E. ring.
Qed.

(* ChainRejection.v's drafter q ctx0 ctx (the round's start and the text) is the instance
   St := list nat, the state being the round's start, reset after a resample or a bonus. *)
Corollary chain_stream_hist_memoryless : forall vs p (q : list nat -> list nat -> nat -> Q) K s ctx0 ctx k,
  stream_prob_hist vs p q
    (fun c0 c x kd => match kd with accepted => c0 | _ => c ++ [x] end) K ctx0 ctx k s
  == stream_prob vs p q K ctx0 ctx k s.
Proof.
  intros vs p q K s. induction s as [|x s IH]; intros ctx0 ctx k; [reflexivity|].
  destruct k as [|k]; cbn [stream_prob_hist stream_prob]; rewrite ?IH; reflexivity.
Qed.
