(* DominoStream.v -- Domino's corrected drafts under chain rejection (DO2; issue 61, item 3).

   Map to the rows of proofs/README.md:
   - DO2 : domino_rejection_stream  (Domino's rollout is an instance of StreamHist's drafter with
                                     memory: with the verifier told the corrected law each draft
                                     was drawn from, the stream has the law of sequential
                                     sampling from the target, whatever the backbone, the
                                     correction head and the GRU)
           mismatched_law_example   (the converse, on an instance: drafts drawn from one law, the
                                     verifier told another -- e.g. the backbone's own law -- and
                                     the emitted token's law is not the target's)

   Model: ChainRejection.v / StreamHist.v (exact rationals, acceptance probability min(1, p/q)
   as given, the stream law a finite recursion). Domino (proofs/domino.md DO2): in a round
   started from the committed text c0, the draft at position i is drawn from the corrected law
   q_i = softmax(process(beta_i + W2 SiLU(W1 [H; s_i]))), where the backbone's H, beta are
   functions of c0 and the GRU state s_i = gru(s_{i-1}, y_{i-1}) starts from s0 at every round's
   root (C9). Here corr c0 i s is that law, any function of the round's start, the position
   and the GRU state (each a distribution over the vocabulary); gru and s0 are any update and
   start. The drafter's state is (c0, i, s): an accepted draft x advances it to (c0, i + 1,
   gru s x); a resample or a bonus starts a new round from the new text. *)

From Coq Require Import List Arith Lia QArith Lqa.
From Specjax Require Import QSums ChainRejection StreamHist.
Import ListNotations.

Local Open Scope Q_scope.

(* The round's start, the draft position in the round, the GRU state. *)
Definition dstate (G : Type) : Type := (list nat * nat * G)%type.

Definition domino_q {G : Type} (corr : list nat -> nat -> G -> nat -> Q) (st : dstate G) (ctx : list nat)
  : nat -> Q :=
  let '(c0, i, s) := st in corr c0 i s.

Definition domino_upd {G : Type} (gru : G -> nat -> G) (s0 : G) (st : dstate G) (ctx : list nat) (x : nat)
    (kd : emit_kind) : dstate G :=
  let '(c0, i, s) := st in
  match kd with
  | accepted => (c0, S i, gru s x)
  | _ => (ctx ++ [x], O, s0)
  end.

(* DO2: chain rejection with the corrected law as draft_probs is lossless for Domino. *)
Theorem domino_rejection_stream : forall (G : Type) vs p (corr : list nat -> nat -> G -> nat -> Q) gru s0 K,
  (forall c, distribution vs (p c)) -> (forall c0 i s, distribution vs (corr c0 i s)) ->
  forall ys st ctx k, Forall (fun x => In x vs) ys ->
  stream_prob_hist vs p (domino_q corr) (domino_upd gru s0) K st ctx k ys == seq_prob p ctx ys.
Proof.
  intros G vs p corr gru s0 K Dp Dc ys st ctx k Hys.
  apply chain_rejection_stream_hist; auto.
  intros [[c0 i] s] c. apply Dc.
Qed.

(* The law of the emitted token when the draft is drawn from q but the verifier is told qhat. *)
Definition mismatched_emit (vs : list nat) (p q qhat : nat -> Q) (x : nat) : Q :=
  q x * qmin 1 (p x / qhat x) + (1 - qsum (fun y => q y * qmin 1 (p y / qhat y)) vs) * residual vs p qhat x.

Lemma mismatched_emit_matched : forall vs p q x, mismatched_emit vs p q q x == emit_prob vs p q x.
Proof. intros. unfold mismatched_emit, emit_prob, reject_prob, accept_prob. reflexivity. Qed.

Definition half (x : nat) : Q := 1 # 2.
Definition point0 (x : nat) : Q := if Nat.eqb x 0 then 1 else 0.

(* Target p = (1/2, 1/2); the corrected law puts all mass on token 0; the verifier is told
   the backbone's law p instead: token 0 is always accepted, so it is emitted with
   probability 1, not 1/2. *)
Theorem mismatched_law_example :
  mismatched_emit [0; 1]%nat half point0 half 0 == 1 /\ ~ (half 0 == 1).
Proof.
  split.
  - unfold mismatched_emit, half, point0, residual, residual_mass, qmin, pos. vm_compute. reflexivity.
  - unfold half. vm_compute. discriminate.
Qed.
