(* DDTreeWalk.v -- DDTree's acceptance length alpha_T is what the verifier's walk accepts
   (issue 39 item 2(d); rows DD1 / DD8 of proofs/README.md, with V1 and V3).

   Map to the rows of proofs/README.md:
   - DD1 : alpha_greedy_walk    (if the target's argmax continuation of ctx is y, the greedy walk
                                 with depth limit L accepts exactly alpha_T(y) tokens)
           alpha_sampling_walk  (if the verifier's samples along y are y -- Y at the slot of
                                 y_1..y_j is y_(j+1) -- the sampling walk with depth limit L
                                 emits alpha_T(y) accepted tokens and one bonus)

   Model: alpha, valid (prefix-closed) and trees are those of DDTreeSurrogate.v (a tree is a
   list of root paths, alpha_T(y) = max{d in 1..L : y_1..y_d in T}, 0 if none); the greedy
   walk is GreedyWalk.accept (target = abstract argmax function g), the sampling walk is
   SamplingWalk.walk (samples = an assignment of one token per slot). The depth limit of the
   walk is L, DDTree's block depth (specjax: max_depth = L). No probabilities are involved:
   these are pointwise identities, so E_{Y~Q}[alpha_T(Y)] of DD1 is the expected accepted
   length of a walk whose samples along Y are Y. *)

From Coq Require Import List Arith Lia QArith.
From Specjax Require Import GreedyWalk DDTreeSurrogate SamplingWalk.
Import ListNotations.
Local Open Scope nat_scope.

(* "The continuation of ctx under g is y", position by position. *)
Lemma greedy_is : forall g y ctx,
  (forall j, j < length y -> g (ctx ++ firstn j y) = nth j y 0) ->
  greedy g ctx (length y) = y.
Proof.
  intros g y; induction y as [|a y IH]; intros ctx H; simpl; auto.
  assert (Ha : g ctx = a) by (specialize (H 0 ltac:(simpl; lia)); rewrite app_nil_r in H; exact H).
  rewrite Ha, IH; auto.
  intros j Hj; rewrite <- app_assoc; apply (H (S j)); simpl; lia.
Qed.

Lemma firstn_greedy : forall g ctx d L, d <= L -> firstn d (greedy g ctx L) = greedy g ctx d.
Proof.
  intros g ctx d L Hd; rewrite (greedy_prefix g ctx d L Hd), firstn_app, greedy_length.
  rewrite firstn_all2 by (rewrite greedy_length; lia).
  replace (d - d) with 0 by lia; apply app_nil_r.
Qed.

(* In a valid tree, a greedy prefix in T has all its non-empty greedy prefixes in T. *)
Lemma greedy_down : forall g ctx T, valid T ->
  forall d, In (greedy g ctx d) T -> forall j, 1 <= j <= d -> In (greedy g ctx j) T.
Proof.
  intros g ctx T HT d; induction d as [|d IH]; intros Hd j Hj; [lia|].
  destruct (Nat.eq_dec j (S d)) as [->|Hne]; auto.
  apply IH; [|lia].
  rewrite greedy_snoc in Hd; apply (HT _ _ Hd).
  intro E; apply (f_equal (@length nat)) in E; rewrite greedy_length in E; simpl in E; lia.
Qed.

Lemma filter_all_true : forall (P : nat -> bool) l,
  (forall x, In x l -> P x = true) -> length (filter P l) = length l.
Proof.
  intros P l; induction l as [|x l IH]; intros H; simpl; auto.
  rewrite (H x (or_introl eq_refl)); simpl; rewrite IH; auto.
  intros; apply H; right; auto.
Qed.

Lemma filter_all_false : forall (P : nat -> bool) l,
  (forall x, In x l -> P x = false) -> length (filter P l) = 0.
Proof.
  intros P l; induction l as [|x l IH]; intros H; simpl; auto.
  rewrite (H x (or_introl eq_refl)); apply IH; intros; apply H; right; auto.
Qed.

(* Item 2(d), greedy: for a valid tree T and a target whose argmax continuation of ctx is y
   (|y| = L), the greedy walk with depth limit L accepts exactly alpha_T(y) tokens. *)
Theorem alpha_greedy_walk : forall g T ctx L y,
  valid T -> length y = L ->
  (forall j, j < L -> g (ctx ++ firstn j y) = nth j y 0) ->
  length (accept g T ctx [] L) = alpha T L y.
Proof.
  intros g T ctx L y HT Hy Hg.
  assert (Gy : greedy g ctx L = y) by (subst L; apply greedy_is; exact Hg).
  rewrite (alpha_is_count T L y HT Hy).
  destruct (walk_accepts_longest_greedy_prefix g T ctx L) as (Hk & Hin & Hstop).
  set (k := length (accept g T ctx [] L)) in *.
  replace (seq 1 L) with (seq 1 (k + (L - k))) by (f_equal; lia).
  rewrite seq_app, filter_app, app_length.
  rewrite (filter_all_true _ (seq 1 k)), (filter_all_false _ (seq (1 + k) (L - k))).
  - rewrite seq_length; lia.
  - intros d Hd; apply in_seq in Hd; unfold memb.
    rewrite <- Gy, firstn_greedy by lia.
    destruct (in_dec path_eq_dec (greedy g ctx d) T) as [I|I]; auto.
    destruct Hstop as [E|Hout]; [lia|].
    exfalso; apply Hout; apply (greedy_down g ctx T HT d I); lia.
  - intros d Hd; apply in_seq in Hd; unfold memb.
    rewrite <- Gy, firstn_greedy by lia.
    destruct (in_dec path_eq_dec (greedy g ctx d) T) as [I|I]; auto.
    exfalso; apply I, Hin; lia.
Qed.

(* The sampling walk is the greedy walk of the target "the sample at the current slot". *)
Lemma sampling_walk_is_accept : forall T a fuel p,
  length (SamplingWalk.walk T a fuel p) = S (length (accept (fun s => look a s) T [] p fuel)).
Proof.
  intros T a fuel; induction fuel as [|f IH]; intros p; simpl; auto.
  destruct (in_dec path_eq_dec (p ++ [look a p]) T); simpl; auto.
Qed.

(* Item 2(d), sampling: for a valid tree T and an assignment of samples whose sample at the
   slot of y_1..y_j is y_(j+1) for j < L (|y| = L), the sampling walk with depth limit L
   emits alpha_T(y) accepted tokens followed by the bonus. *)
Theorem alpha_sampling_walk : forall T a L y,
  valid T -> length y = L ->
  (forall j, j < L -> look a (firstn j y) = nth j y 0) ->
  length (SamplingWalk.walk T a L []) = S (alpha T L y).
Proof.
  intros T a L y HT Hy Ha.
  rewrite sampling_walk_is_accept; f_equal.
  apply alpha_greedy_walk; auto.
Qed.
