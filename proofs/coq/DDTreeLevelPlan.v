(* DDTreeLevelPlan.v -- the candidate bound of the levels method (DD5, issue 50).

   Map to the rows of proofs/README.md:
   - DD5 : level_plan_spec  (a depth-d candidate (j, r) -- rank r below the j-th kept depth-(d-1)
                             prefix -- with (j+1)(r+1) > n_d is never among the first n_d
                             candidates in lax.top_k's order, for ANY score addition that is
                             monotone in each argument, so float32 rounding is covered)
           level_plan_top   (hence restricting the candidates to (j+1)(r+1) <= n_d, as
                             specjax.drafters.ddtree._level_plan does, leaves the first n_d
                             candidates unchanged)

   Model: a candidate is its layout pair (j, r); its score is add (sig j) (lq r) where sig j is
   the score of the j-th kept parent (non-increasing in j: the previous level is a top_k
   output) and lq r the r-th largest log-probability of the depth (non-increasing in r: a
   top_k output); add is any function weakly monotone in each argument (float32 round-to-
   nearest addition is, on finite values: fl is monotone). lax.top_k's order is "score
   descending, then lower index", and _level_plan lays the candidates out in (j, r)
   lexicographic order, so index order is lexicographic order on (j, r). Scores are
   rationals standing for finite floats: -inf (log 0) and NaN are not modelled. *)

From Coq Require Import List Arith Lia QArith Lqa Sorted.
Import ListNotations.

Notation cand := (nat * nat)%type.

Definition lexlt (c c' : cand) : Prop := (fst c < fst c' \/ (fst c = fst c' /\ snd c < snd c'))%nat.

Definition score (sig lq : nat -> Q) (add : Q -> Q -> Q) (c : cand) : Q := add (sig (fst c)) (lq (snd c)).

(* lax.top_k's order on the layout: higher score first, ties to the lower (lexicographic) index. *)
Definition before (sig lq : nat -> Q) (add : Q -> Q -> Q) (c c' : cand) : Prop :=
  score sig lq add c' < score sig lq add c
  \/ (score sig lq add c == score sig lq add c' /\ lexlt c c').

(* The candidates (j', r') <= (j, r) componentwise, other than (j, r). *)
Definition below (j r : nat) : list cand := list_prod (seq 0 j) (seq 0 (S r)) ++ map (pair j) (seq 0 r).

Lemma NoDup_app_gen : forall A (l1 l2 : list A), NoDup l1 -> NoDup l2 ->
  (forall x, In x l1 -> ~ In x l2) -> NoDup (l1 ++ l2).
Proof.
  induction l1 as [|a l1 IH]; intros l2 H1 H2 Hd; simpl; auto.
  inversion H1; subst. constructor.
  - intro Hin. apply in_app_or in Hin as [Hin | Hin]; [contradiction|].
    exact (Hd a (or_introl eq_refl) Hin).
  - apply IH; auto. intros x Hx. apply Hd. right; exact Hx.
Qed.

Lemma NoDup_map_pair : forall (a : nat) (l : list nat), NoDup l -> NoDup (map (pair a) l).
Proof.
  induction l as [|x l IH]; intros H; simpl; constructor.
  - intro Hin. apply in_map_iff in Hin as [y [E Hy]]. inversion E; subst. inversion H; contradiction.
  - apply IH. inversion H; auto.
Qed.

Lemma NoDup_list_prod_nat : forall (l1 l2 : list nat), NoDup l1 -> NoDup l2 -> NoDup (list_prod l1 l2).
Proof.
  induction l1 as [|a l1 IH]; intros l2 H1 H2; simpl; [constructor|].
  inversion H1; subst. apply NoDup_app_gen; auto using NoDup_map_pair.
  intros x Hx Hin. apply in_map_iff in Hx as [y [<- _]]. apply in_prod_iff in Hin as [Ha _]. contradiction.
Qed.

Lemma below_NoDup : forall j r, NoDup (below j r).
Proof.
  intros j r. unfold below. apply NoDup_app_gen.
  - apply NoDup_list_prod_nat; apply seq_NoDup.
  - apply NoDup_map_pair, seq_NoDup.
  - intros [a b] Hx Hin. apply in_prod_iff in Hx as [Ha _]. apply in_seq in Ha.
    apply in_map_iff in Hin as [y [E _]]. inversion E; subst. lia.
Qed.

Lemma below_length : forall j r, length (below j r) = (S j * S r - 1)%nat.
Proof.
  intros j r. unfold below. rewrite app_length, prod_length, map_length, !seq_length. lia.
Qed.

Lemma below_spec : forall j r c, In c (below j r) ->
  (fst c <= j /\ snd c <= r /\ lexlt c (j, r))%nat.
Proof.
  intros j r [a b] H. unfold below in H. apply in_app_or in H as [H | H].
  - apply in_prod_iff in H as [Ha Hb]. apply in_seq in Ha. apply in_seq in Hb.
    unfold lexlt; simpl; lia.
  - apply in_map_iff in H as [y [E Hy]]. inversion E; subst. apply in_seq in Hy.
    unfold lexlt; simpl; lia.
Qed.

Lemma before_asym : forall sig lq add c c', before sig lq add c c' -> before sig lq add c' c -> False.
Proof.
  unfold before, lexlt. intros sig lq add c c' [H1 | [H1 H2]] [H3 | [H3 H4]]; try lra; lia.
Qed.

Lemma before_irrefl : forall sig lq add c, before sig lq add c c -> False.
Proof. intros sig lq add c H. exact (before_asym sig lq add c c H H). Qed.

(* Every candidate componentwise below (j, r) comes before it: its score is >= (monotone
   addition of larger or equal summands) and its index is lower. *)
Lemma below_before : forall (sig lq : nat -> Q) (add : Q -> Q -> Q) j r c,
  (forall j1 j2, (j1 <= j2)%nat -> sig j2 <= sig j1) ->
  (forall r1 r2, (r1 <= r2)%nat -> lq r2 <= lq r1) ->
  (forall a a' b b', a <= a' -> b <= b' -> add a b <= add a' b') ->
  In c (below j r) -> before sig lq add c (j, r).
Proof.
  intros sig lq add j r c Hs Hl Ha Hc. destruct (below_spec j r c Hc) as (Hj & Hr & Hlex).
  assert (Hge : score sig lq add (j, r) <= score sig lq add c).
  { unfold score; simpl. apply Ha; [apply Hs | apply Hl]; assumption. }
  unfold before. destruct (Qlt_le_dec (score sig lq add (j, r)) (score sig lq add c)) as [Hlt | Hle].
  - left; exact Hlt.
  - right. split; [apply Qle_antisym; assumption | exact Hlex].
Qed.

Lemma sorted_after : forall A (R : A -> A -> Prop) (l1 l2 : list A) x y,
  StronglySorted R (l1 ++ x :: l2) -> In y l2 -> R x y.
Proof.
  intros A R l1; induction l1 as [|a l1 IH]; intros l2 x y H Hy; simpl in H.
  - apply StronglySorted_inv in H as [_ H]. rewrite Forall_forall in H. auto.
  - apply StronglySorted_inv in H as [H _]. eapply IH; eauto.
Qed.

(* DD5, the candidate bound: if (j+1)(r+1) > n_d, the candidate (j, r) is not among the first
   n_d of any list sorted by top_k's order that holds every candidate componentwise below it
   (the layout holds all (j', r') with j' < #kept parents and r' < K, so it holds them). *)
Theorem level_plan_spec : forall (sig lq : nat -> Q) (add : Q -> Q -> Q) j r nd (ord : list cand),
  (forall j1 j2, (j1 <= j2)%nat -> sig j2 <= sig j1) ->
  (forall r1 r2, (r1 <= r2)%nat -> lq r2 <= lq r1) ->
  (forall a a' b b', a <= a' -> b <= b' -> add a b <= add a' b') ->
  (nd < S j * S r)%nat ->
  StronglySorted (before sig lq add) ord ->
  (forall c, In c (below j r) -> In c ord) ->
  ~ In (j, r) (firstn nd ord).
Proof.
  intros sig lq add j r nd ord Hs Hl Ha Hnd HS Hin Hx.
  destruct (in_split _ _ Hx) as [A [B E]].
  assert (HA : (length A < nd)%nat).
  { pose proof (firstn_le_length nd ord) as H. rewrite E, app_length in H. simpl in H. lia. }
  assert (Hord : ord = A ++ (j, r) :: (B ++ skipn nd ord)).
  { rewrite <- (firstn_skipn nd ord) at 1. rewrite E, <- app_assoc. reflexivity. }
  assert (Hsub : incl (below j r) A).
  { intros c Hc. pose proof (Hin c Hc) as Hc'. rewrite Hord in Hc'.
    pose proof (below_before sig lq add j r c Hs Hl Ha Hc) as Hb.
    apply in_app_or in Hc' as [Hc' | [Hc' | Hc']]; [exact Hc' | |].
    - subst c. exfalso. exact (before_irrefl _ _ _ _ Hb).
    - exfalso. rewrite Hord in HS. exact (before_asym _ _ _ _ _ Hb (sorted_after _ _ _ _ _ _ HS Hc')). }
  pose proof (NoDup_incl_length (below_NoDup j r) Hsub) as Hlen.
  rewrite below_length in Hlen. lia.
Qed.

Lemma firstn_filter_id : forall A (P : A -> bool) n l,
  (forall x, In x (firstn n l) -> P x = true) -> firstn n (filter P l) = firstn n l.
Proof.
  intros A P n. induction n as [|n IH]; intros l H; [reflexivity|]. destruct l as [|x l]; [reflexivity|].
  simpl. rewrite (H x (or_introl eq_refl)). simpl. f_equal. apply IH. intros y Hy. apply H. right; exact Hy.
Qed.

(* _level_plan's restriction: keeping only the candidates with (j+1)(r+1) <= n_d leaves the
   first n_d candidates in top_k's order unchanged, when the candidate list is closed
   downwards (with (j, r) it holds every (j', r') <= (j, r) componentwise: the layout holds all
   pairs j' < #kept parents, r' < K). *)
Theorem level_plan_top : forall (sig lq : nat -> Q) (add : Q -> Q -> Q) nd (ord : list cand),
  (forall j1 j2, (j1 <= j2)%nat -> sig j2 <= sig j1) ->
  (forall r1 r2, (r1 <= r2)%nat -> lq r2 <= lq r1) ->
  (forall a a' b b', a <= a' -> b <= b' -> add a b <= add a' b') ->
  StronglySorted (before sig lq add) ord ->
  (forall j r c, In (j, r) ord -> In c (below j r) -> In c ord) ->
  firstn nd (filter (fun c => Nat.leb (S (fst c) * S (snd c)) nd) ord) = firstn nd ord.
Proof.
  intros sig lq add nd ord Hs Hl Ha HS Hcl.
  apply firstn_filter_id. intros [j r] Hx. cbn [fst snd].
  destruct (Nat.leb_spec (S j * S r) nd) as [Hle | Hgt]; [reflexivity|]. exfalso.
  apply (level_plan_spec sig lq add j r nd ord Hs Hl Ha Hgt HS); [|exact Hx].
  intros c Hc. apply (Hcl j r c); [|exact Hc].
  rewrite <- (firstn_skipn nd ord). apply in_or_app. left; exact Hx.
Qed.
