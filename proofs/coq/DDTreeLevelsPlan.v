(* DDTreeLevelsPlan.v -- the levels method end to end, with its candidate plan (DD5; issue 61).

   Map to the rows of proofs/README.md:
   - DD5 : plan_bound_prec        (a depth-d candidate "rank r below the j-th kept depth-(d-1)
                                   prefix" with (j+1)(r+1) > N is not among the first N
                                   children in the order: the (j+1)(r+1) - 1 candidates
                                   componentwise below it all come first)
           level_plan_eq          (the level as the code builds it -- candidates restricted to
                                   (j+1)(r+1) <= n_d, n_d = min(N, K^d), K = min(N, V), then the
                                   best n_d of them -- is DDTreeSelect.level, the best N
                                   children of rank < K of the previous level)
           levels_plan_select_spec (the levels method with its plan returns the first N
                                   prefixes in the order, in that order: first_n_prefixes)
           select_levels_plan_spec (the same on a raw table, in token space: = select)

   Model: DDTreeSelect.v's (exact rationals, rank tuples, the order ≺ of DDTreeOrder.v decides
   every tie). specjax.drafters.ddtree._level_plan lists, for d >= 2, the candidates (j, r)
   -- child of the j-th kept depth-(d-1) prefix with rank r < K -- in (j, r) order, keeping
   those with (j+1)(r+1) <= n_d; _select_row_levels keeps the best n_d = sizes[d-1] of them
   (lax.top_k), and at the end the best N of all levels. Here the candidates are
   DDTreeSelect.children K D (same (j, r) order) filtered by plan_ok n_d D, j being the
   position of the candidate's parent in the previous level D (at depth 1 the filter keeps
   everything, as the code's depth-1 level takes the first K ranks). Not modelled: float32
   scores and lax.top_k's index tie-break (DDTreeLevelPlan.level_plan_top covers the bound
   for float32 sums in top_k's own order). *)

From Coq Require Import List Arith Lia QArith Sorted Permutation Bool.
From Specjax Require Import GreedyWalk DDTreeSurrogate DDTreeOrder DDTreeSelect DDTreeLevelPlan.
Import ListNotations.
Local Open Scope nat_scope.

(* The position of a prefix in a list of prefixes. *)
Fixpoint pidx (x : list nat) (l : list (list nat)) : nat :=
  match l with
  | [] => 0
  | y :: l' => if path_eq_dec x y then 0 else S (pidx x l')
  end.

Lemma pidx_nth : forall x l, In x l -> nth (pidx x l) l [] = x /\ pidx x l < length l.
Proof.
  intros x l. induction l as [|y l IH]; intros H; [destruct H|]. simpl.
  destruct (path_eq_dec x y) as [-> | Hne]; [split; [reflexivity | lia]|].
  destruct H as [-> | H]; [contradiction|]. destruct (IH H). split; [auto | lia].
Qed.

(* _level_plan's test on a candidate u = p ++ [r], p the j-th prefix of D: (j+1)(r+1) <= nd. *)
Definition plan_ok (nd : nat) (D : list (list nat)) (u : list nat) : bool :=
  Nat.leb (S (pidx (removelast u) D) * S (last u 0)) nd.

(* n_d = min(N, K^d), K = min(N, V): _level_plan's sizes. *)
Definition plan_size (N V d : nat) : nat := Nat.min N (Nat.min N V ^ d).

(* The code's level d: the plan's candidates, the best n_d of them. *)
Fixpoint level_plan (q : nat -> nat -> Q) (V N d : nat) : list (list nat) :=
  match d with
  | O => [[]]
  | S d' =>
      let D := level_plan q V N d' in
      firstn (plan_size N V d) (sortp q (filter (plan_ok (plan_size N V d) D) (children (Nat.min N V) D)))
  end.

(* _select_row_levels: the best N of all levels. *)
Definition levels_plan_select (q : nat -> nat -> Q) (V L N : nat) : list (list nat) :=
  firstn N (sortp q (flat_map (level_plan q V N) (seq 1 L))).

(* ---------- the bound in the order ≺ ---------- *)

Lemma Forall2_le_refl : forall (u : list nat), Forall2 le u u.
Proof. induction u; constructor; auto. Qed.

Lemma StronglySorted_firstn : forall A (R : A -> A -> Prop) n l, StronglySorted R l -> StronglySorted R (firstn n l).
Proof.
  intros A R n; induction n as [|n IH]; intros l H; [constructor|]. destruct l as [|x l]; [constructor|].
  apply StronglySorted_inv in H as [H1 H2]. simpl. constructor; auto.
  rewrite Forall_forall in *. intros y Hy. apply H2. exact (In_firstn _ _ _ _ Hy).
Qed.

Lemma NoDup_incl_length' : forall (A : Type) (l l' : list A), NoDup l -> incl l l' -> length l <= length l'.
Proof. intros. apply NoDup_incl_length; auto. Qed.

Theorem plan_bound_prec : forall q V L K d (D : list (list nat)) j r N,
  ranked q V 1 L -> S d <= L -> K <= V -> NoDup D -> StronglySorted (prec q) D ->
  (forall p, In p D -> length p = d /\ Forall (fun v => v < V) p) ->
  j < length D -> r < K -> N < S j * S r ->
  ~ In (nth j D [] ++ [r]) (firstn N (sortp q (children K D))).
Proof.
  intros q V L K d D j r N Hr HL HK ND SD HD Hj Hrk HN Hin.
  set (c := nth j D [] ++ [r]) in *.
  set (A := sortp q (children K D)) in *.
  assert (NDA : NoDup A) by (apply sortp_NoDup, children_NoDup, ND).
  assert (SA : StronglySorted (prec q) A) by (apply sortp_sorted, children_NoDup, ND).
  destruct (in_split _ _ Hin) as (F1 & F2 & HF).
  assert (HF1 : length F1 < N).
  { pose proof (firstn_le_length N A) as H. rewrite HF, app_length in H. simpl in H. lia. }
  assert (HA : A = F1 ++ c :: (F2 ++ skipn N A)).
  { rewrite <- (firstn_skipn N A) at 1. rewrite HF, <- app_assoc. reflexivity. }
  set (cp := fun x : nat * nat => nth (fst x) D [] ++ [snd x]).
  set (B := map cp (below j r)).
  assert (Hpre : forall a, a < length D -> forall v, v < V -> is_prefix V L (nth a D [] ++ [v])).
  { intros a Ha v Hv. destruct (HD (nth a D []) (nth_In _ _ Ha)) as [Hl Hf].
    split; [rewrite app_length; simpl; lia | apply Forall_app; split; auto]. }
  assert (HB : forall b, In b B -> In b A /\ prec q b c).
  { intros b Hb. apply in_map_iff in Hb as ([a v] & <- & Hab).
    destruct (below_spec j r (a, v) Hab) as (Ha & Hv & Hlex). cbn [fst snd] in *. unfold cp. cbn [fst snd].
    split.
    - apply sortp_In, children_In. exists (nth a D []), v. split; [reflexivity|]. split; [apply nth_In; lia | lia].
    - unfold lexlt in Hlex. cbn [fst snd] in Hlex. unfold c.
      assert (Hlow : forall p, In p D -> v < r -> prec q (p ++ [v]) (p ++ [r])).
      { intros p Hp Hvr. destruct (In_nth _ _ [] Hp) as (k & Hk & <-).
        apply (lemma0_lower_ranks q V L); auto.
        - apply Hpre; auto; lia.
        - apply Forall2_app; [apply Forall2_le_refl | constructor; [lia | constructor]].
        - intro E. apply app_inj_tail in E as [_ E]. lia. }
      destruct Hlex as [Hlt | [-> Hlt]].
      + assert (Hpp : prec q (nth a D []) (nth j D [])) by (apply StronglySorted_nth; auto).
        assert (Hc : prec q (nth a D [] ++ [r]) (nth j D [] ++ [r])).
        { apply (lemma0_child_order q V L); auto; try (apply Hpre; lia).
          assert (Ha' : a < length D) by lia.
          rewrite (proj1 (HD _ (nth_In _ [] Ha'))), (proj1 (HD _ (nth_In _ [] Hj))).
          reflexivity. }
        destruct (Nat.eq_dec v r) as [-> | Hne]; [exact Hc|].
        apply (prec_trans q _ (nth a D [] ++ [r])); auto. apply Hlow; [apply nth_In | ]; lia.
      + apply Hlow; [apply nth_In |]; lia. }
  assert (NDB : NoDup B).
  { apply NoDup_map_inj_gen; [|apply below_NoDup].
    intros [a v] [a' v'] Ha Ha' E. unfold cp in E. cbn [fst snd] in E.
    apply app_inj_tail in E as [E1 E2].
    destruct (below_spec j r _ Ha) as (Ha1 & _). destruct (below_spec j r _ Ha') as (Ha1' & _).
    cbn [fst] in Ha1, Ha1'.
    assert (a = a') by (apply (proj1 (NoDup_nth D []) ND); auto; lia). subst. reflexivity. }
  assert (Hinc : incl B F1).
  { intros b Hb. destruct (HB b Hb) as [HbA Hbc]. rewrite HA in SA, HbA.
    apply (sorted_before _ (prec q) F1 c (F2 ++ skipn N A) b); auto. apply prec_asym. }
  pose proof (NoDup_incl_length' _ _ _ NDB Hinc) as Hlen.
  unfold B in Hlen. rewrite map_length, below_length in Hlen. lia.
Qed.

(* ---------- the code's level is DDTreeSelect.level ---------- *)

Lemma children_length : forall K D, length (children K D) = length D * K.
Proof.
  intros K D. induction D as [|p D IH]; [reflexivity|].
  unfold children in *. cbn [flat_map]. rewrite app_length, map_length, seq_length, IH. simpl. lia.
Qed.

Lemma filter_length_le' : forall A (f : A -> bool) l, length (filter f l) <= length l.
Proof. intros A f l; induction l as [|x l IH]; simpl; [lia|]. destruct (f x); simpl; lia. Qed.

Lemma level_length : forall q V N d, length (level q V N d) <= Nat.min N V ^ d.
Proof.
  intros q V N d; induction d as [|d IH]; [simpl; lia|].
  cbn [level]. rewrite firstn_length. rewrite (Permutation_length (sortp_perm q _)), children_length.
  rewrite Nat.pow_succ_r'. pose proof (Nat.mul_le_mono_r _ _ (Nat.min N V) IH). lia.
Qed.

(* What the levels hold: duplicate-free, sorted by ≺, depth-d prefixes of ranks < V. *)
Lemma level_facts : forall q V L N d, ranked q V 1 L -> d <= L ->
  NoDup (level q V N d) /\ StronglySorted (prec q) (level q V N d)
  /\ (forall p, In p (level q V N d) -> length p = d /\ Forall (fun v => v < V) p).
Proof.
  intros q V L N d Hr Hd. destruct d as [|d'].
  - cbn [level]. split; [repeat constructor; auto|]. split; [repeat constructor|].
    intros p [<- | []]. split; [reflexivity | constructor].
  - rewrite (level_spec q V L N (S d') Hr) by lia. split; [|split].
    + apply NoDup_firstn_l, ord_at_NoDup.
    + apply StronglySorted_firstn, ord_at_sorted.
    + intros p Hp. apply In_firstn, ord_at_In in Hp. exact Hp.
Qed.

Lemma firstn_both_all : forall A (l : list A) a b, length l <= a -> length l <= b -> firstn a l = firstn b l.
Proof. intros. rewrite !firstn_all2 by lia. reflexivity. Qed.

Theorem level_plan_eq : forall q V L N d, ranked q V 1 L -> d <= L ->
  level_plan q V N d = level q V N d.
Proof.
  intros q V L N d Hr. induction d as [|d IH]; intros Hd; [reflexivity|].
  cbn [level_plan level]. rewrite IH by lia.
  set (K := Nat.min N V). set (D := level q V N d).
  destruct (level_facts q V L N d Hr ltac:(lia)) as (ND & SD & HD). fold D in ND, SD, HD.
  assert (HlenD : length D <= K ^ d) by apply level_length.
  assert (HKV : K <= V) by (unfold K; lia).
  (* Step A: on the children, the plan's test with n_d is the test with N. *)
  assert (Hcand : forall u, In u (children K D) ->
            exists p r, u = p ++ [r] /\ In p D /\ r < K /\ S (pidx p D) * S r <= K ^ S d).
  { intros u Hu. apply children_In in Hu as (p & r & -> & Hp & Hrk). exists p, r.
    repeat split; auto. destruct (pidx_nth p D Hp) as [_ Hj].
    rewrite Nat.pow_succ_r'. rewrite Nat.mul_comm. apply Nat.mul_le_mono; lia. }
  assert (HA : filter (plan_ok (plan_size N V (S d)) D) (children K D) = filter (plan_ok N D) (children K D)).
  { apply filter_ext_in. intros u Hu. destruct (Hcand u Hu) as (p & r & -> & _ & _ & Hb).
    unfold plan_ok, plan_size. fold K. rewrite removelast_last, last_last.
    destruct (Nat.leb_spec (S (pidx p D) * S r) (Nat.min N (K ^ S d)));
      destruct (Nat.leb_spec (S (pidx p D) * S r) N); auto; lia. }
  rewrite HA. set (S0 := filter (plan_ok N D) (children K D)).
  (* Step B: n_d and N keep the same prefix of the sorted candidates. *)
  assert (HB : firstn (plan_size N V (S d)) (sortp q S0) = firstn N (sortp q S0)).
  { unfold plan_size. fold K. destruct (Nat.le_ge_cases N (K ^ S d)) as [Hle | Hge].
    - rewrite Nat.min_l by lia. reflexivity.
    - rewrite Nat.min_r by lia.
      assert (Hl : length (sortp q S0) <= K ^ S d).
      { rewrite (Permutation_length (sortp_perm q _)). unfold S0.
        pose proof (filter_length_le' _ (plan_ok N D) (children K D)) as H1.
        rewrite children_length in H1. rewrite Nat.pow_succ_r'.
        pose proof (Nat.mul_le_mono_r _ _ K HlenD). lia. }
      apply firstn_both_all; lia. }
  rewrite HB.
  (* Step C: the candidates the plan drops are never among the first N. *)
  apply firstn_sort_sub.
  - apply sortp_NoDup, children_NoDup, ND.
  - apply sortp_sorted, children_NoDup, ND.
  - apply NoDup_filter, children_NoDup, ND.
  - intros u Hu. apply filter_In in Hu as [Hu _]. apply sortp_In. exact Hu.
  - intros u Hu. pose proof (In_firstn _ _ _ _ Hu) as Hu'. apply sortp_In in Hu'.
    apply filter_In. split; [exact Hu'|].
    apply children_In in Hu' as (p & r & -> & Hp & Hrk).
    unfold plan_ok. rewrite removelast_last, last_last.
    destruct (Nat.leb_spec (S (pidx p D) * S r) N) as [|Hgt]; [reflexivity|]. exfalso.
    destruct (pidx_nth p D Hp) as [Hnth Hj].
    apply (plan_bound_prec q V L K d D (pidx p D) r N Hr ltac:(lia) HKV ND SD HD Hj Hrk Hgt).
    rewrite Hnth. exact Hu.
Qed.

(* DD5 end to end: the levels method as the code runs it, candidate plan included, returns
   the first N prefixes in the order, in that order. *)
Theorem levels_plan_select_spec : forall q V L N, ranked q V 1 L ->
  levels_plan_select q V L N = first_n_prefixes q V L N.
Proof.
  intros q V L N Hr. rewrite <- levels_select_spec by exact Hr.
  unfold levels_plan_select, levels_select. f_equal. f_equal.
  assert (E : forall l, (forall d, In d l -> d <= L) -> flat_map (level_plan q V N) l = flat_map (level q V N) l).
  { intros l; induction l as [|d l IH]; intros H; [reflexivity|]. cbn [flat_map].
    rewrite (level_plan_eq q V L N d Hr) by (apply H; left; reflexivity). f_equal. apply IH. intros; apply H; right; auto. }
  apply E. intros d Hd. apply in_seq in Hd. lia.
Qed.

(* On a raw marginal table, in token space: the levels method with its plan is select. *)
Definition select_levels_plan (tbl : list (list Q)) (V L N : nat) : list (list nat) :=
  map (to_tokens tbl V 1) (levels_plan_select (rq tbl V) V L N).

Theorem select_levels_plan_spec : forall tbl V L N, table_ok tbl V L ->
  select_levels_plan tbl V L N = select tbl V L N.
Proof.
  intros tbl V L N H. unfold select_levels_plan. rewrite levels_plan_select_spec by (apply ranked_rq; exact H).
  rewrite <- levels_select_spec by (apply ranked_rq; exact H). apply select_levels_spec. exact H.
Qed.
