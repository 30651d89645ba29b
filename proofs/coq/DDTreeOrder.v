(* DDTreeOrder.v -- the selection order of DDTree, Proposition 2 and Lemma 1 (rows DD2 and
   DD3 of proofs/README.md; proofs/ddtree.md §1 Lemma 0, §3, §4), in exact arithmetic.

   Map to the rows of proofs/README.md:
   - DD2 : ddtree_proposition2   (the first N prefixes in the order ≺ form a valid tree with
                                  min(N, P) nodes whose sum of prefix probabilities is >= that
                                  of every set of at most N prefixes, valid or not)
           topN_optimal          (the exchange argument: the first N elements of a list sorted
                                  by a non-increasing weight f >= 0 maximise the sum of f over
                                  every duplicate-free sub-list of at most N elements)
           lemma0_parent         (Lemma 0.1: the parent comes first)
           lemma0_lower_ranks    (Lemma 0.2: lowering ranks comes first)
           lemma0_child_order    (Lemma 0.3: p' ≺ p of equal depth => p'·v ≺ p·v)
   - DD3 : ddtree_lemma1         (every prefix of that tree only uses the top min(N, V) ranks
                                  at every depth)
   - DD2 (well-definedness of "the first N prefixes in ≺"):
           prec_total            (≺ is a strict total order on prefixes: with prec_irrefl,
                                  prec_asym, prec_trans)
           existence_of_the_order (sorting the explicit enumeration of all prefixes by ≺ gives
                                  a duplicate-free list of all prefixes, strictly sorted)
           uniqueness_of_the_order (two such lists are equal)

   Model / differences from the written statement (see proofs/README.md,
   "Machine-checked (Coq)"):
   - exact rationals: the score of a prefix is q(u) itself (a product of rationals), not a
     float32 sum of logarithms; q = 0 and q = 1 are allowed; ordering by -q(u) is the same
     as ordering by -log q(u);
   - a prefix is identified with its rank tuple, as ddtree.md §0 does: token v at depth d IS
     its rank, i.e. the hypothesis [ranked] says each row q d is non-increasing in the
     token on {0..V-1} (and 0 <= q d v <= 1); the rank tie-break by token id is then the
     order on nat;
   - key(u) = (-q(u), |u|, -q(u_1..u_{d-1}), ..., -q(u_1), u_1, ..., u_d), compared
     lexicographically (ddtree.md §1), as a list of rationals;
   - "the first N prefixes in the order ≺" is firstn N ord for any list ord that enumerates
     the prefixes without duplicates and is strictly sorted by ≺; existence_of_the_order
     (below) shows that such a list exists (insertion sort of an explicit enumeration), and
     any two such lists are equal since ≺ is a strict total order;
   - Proposition 3 (best-first search, DD4) is in DDTreeHeap.v and the levels formulation
     (DD5) in DDTreeSelect.v; the float32 statement (optimal up to e^{2 eps}) and DD0 in
     float32 are not covered here, nor the consequence of Lemma 1 that the first n prefixes
     of S_K are exactly T_N. *)

From Coq Require Import List Arith Lia QArith Lqa Sorted Permutation.
From Specjax Require Import GreedyWalk QSums DDTreeSurrogate.
Import ListNotations.
Local Open Scope nat_scope.

(* ---------- hypotheses on the marginals ---------- *)

(* Rows d = k .. k+n-1: values in [0, 1], non-increasing in the token (= rank). *)
Definition ranked (q : nat -> nat -> Q) (V k n : nat) : Prop :=
  forall d, k <= d < k + n ->
    (forall v, v < V -> (0 <= q d v <= 1)%Q) /\
    (forall v w, v <= w < V -> (q d w <= q d v)%Q).

Lemma ranked_shift : forall q V k n, ranked q V k (S n) -> ranked q V (S k) n.
Proof. intros q V k n H d Hd. apply H. lia. Qed.

Lemma qprod_nonneg : forall q V n u k, ranked q V k n -> length u <= n ->
  Forall (fun v => v < V) u -> (0 <= qprod q k u)%Q.
Proof.
  intros q V n u. revert n. induction u as [|a u IH]; intros n k Hr Hl Hf; cbn [qprod].
  - lra.
  - destruct n; [simpl in Hl; lia|]. inversion Hf; subst.
    destruct (Hr k ltac:(lia)) as [H01 _]. destruct (H01 a ltac:(auto)).
    assert (0 <= qprod q (S k) u)%Q by (apply (IH n); auto; [apply ranked_shift; auto | simpl in Hl; lia]).
    apply Qmult_le_0_compat; auto.
Qed.

Lemma qprod_snoc : forall q u a k, (qprod q k (u ++ [a]) == qprod q k u * q (k + length u)%nat a)%Q.
Proof.
  intros q u. induction u as [|b u IH]; intros a k; cbn [qprod app length].
  - rewrite Nat.add_0_r. ring.
  - rewrite IH. replace (S k + length u) with (k + S (length u)) by lia. ring.
Qed.

(* Componentwise smaller ranks give a larger product. *)
Lemma qprod_mono : forall q V n u' u k, ranked q V k n -> length u <= n ->
  Forall (fun v => v < V) u -> Forall2 le u' u -> (qprod q k u <= qprod q k u')%Q.
Proof.
  intros q V n u' u. revert n u'. induction u as [|a u IH]; intros n u' k Hr Hl Hf H2.
  - inversion H2; subst. cbn [qprod]. lra.
  - inversion H2 as [|a' ? u'' ? Ha' H2']; subst. destruct n; [simpl in Hl; lia|].
    inversion Hf; subst. cbn [qprod].
    destruct (Hr k ltac:(lia)) as [H01 Hmon].
    assert (Hq : (q k a <= q k a')%Q) by (apply Hmon; lia).
    assert (0 <= q k a)%Q by (apply H01; auto).
    assert (Hrest : (qprod q (S k) u <= qprod q (S k) u'')%Q)
      by (apply (IH n); auto; [apply ranked_shift; auto | simpl in Hl; lia]).
    assert (0 <= qprod q (S k) u)%Q
      by (apply (qprod_nonneg q V n); auto; [apply ranked_shift; auto | simpl in Hl; lia]).
    apply Qmult_le_compat_nonneg; split; auto.
Qed.

(* ---------- the key and the order ≺ ---------- *)

Definition key (q : nat -> nat -> Q) (u : list nat) : list Q :=
  [(- qp q u)%Q; qnat (length u)] ++
  map (fun j => (- qp q (firstn j u))%Q) (rev (seq 1 (length u - 1))) ++
  map qnat u.

Fixpoint lex_lt (a b : list Q) : Prop :=
  match a, b with
  | x :: a', y :: b' => (x < y)%Q \/ (x == y /\ lex_lt a' b')%Q
  | _, _ => False
  end.

(* u ≺ w: u is selected before w. *)
Definition prec (q : nat -> nat -> Q) (u w : list nat) : Prop := lex_lt (key q u) (key q w).

Lemma lex_asym : forall a b, lex_lt a b -> lex_lt b a -> False.
Proof.
  induction a as [|x a IH]; intros [|y b]; simpl; try tauto.
  intros [H | [E H]] [H' | [E' H']]; try lra. eauto.
Qed.

Lemma lex_irrefl : forall a, ~ lex_lt a a.
Proof. intros a H. exact (lex_asym a a H H). Qed.

Lemma lex_trans : forall a b c, lex_lt a b -> lex_lt b c -> lex_lt a c.
Proof.
  induction a as [|x a IH]; intros [|y b] [|z c]; simpl; try tauto.
  intros [H | [E H]] [H' | [E' H']].
  - left. lra.
  - left. lra.
  - left. lra.
  - right. split; [lra | eauto].
Qed.

Lemma lex_le_neq : forall a b, Forall2 Qle a b -> ~ Forall2 Qeq a b -> lex_lt a b.
Proof.
  intros a b H. induction H as [|x y a b Hxy H IH]; intros Hn.
  - exfalso. apply Hn. constructor.
  - simpl. destruct (Qle_lt_or_eq _ _ Hxy) as [L | E]; [left; auto|].
    right. split; [exact E|]. apply IH. intro Hab. apply Hn. constructor; auto.
Qed.

Lemma prec_irrefl : forall q u, ~ prec q u u.
Proof. intros. apply lex_irrefl. Qed.

Lemma prec_asym : forall q u w, prec q u w -> prec q w u -> False.
Proof. intros q u w. apply lex_asym. Qed.

Lemma prec_trans : forall q u v w, prec q u v -> prec q v w -> prec q u w.
Proof. intros q u v w. apply lex_trans. Qed.

(* The first component of the key is -q(u): ≺ sorts by q descending. *)
Lemma prec_score : forall q u w, prec q u w -> (qp q w <= qp q u)%Q.
Proof.
  intros q u w H. unfold prec, key in H. simpl in H. destruct H as [H | [H _]]; lra.
Qed.

Lemma qnat_lt : forall m n, m < n -> (qnat m < qnat n)%Q.
Proof. intros. unfold qnat, Qlt. simpl. lia. Qed.

Lemma qnat_le : forall m n, m <= n -> (qnat m <= qnat n)%Q.
Proof. intros. unfold qnat, Qle. simpl. lia. Qed.

Lemma qnat_inj : forall m n, (qnat m == qnat n)%Q -> m = n.
Proof. intros m n H. unfold qnat, Qeq in H. simpl in H. lia. Qed.

(* Lemma 0.1: a parent comes before its children. *)
Theorem lemma0_parent : forall q V L p a, ranked q V 1 L -> is_prefix V L (p ++ [a]) ->
  prec q p (p ++ [a]).
Proof.
  intros q V L p a Hr [Hl Hf]. rewrite app_length in Hl. simpl in Hl.
  apply Forall_app in Hf. destruct Hf as [Hfp Hfa]. inversion Hfa; subst.
  assert (Hp0 : (0 <= qp q p)%Q) by (apply (qprod_nonneg q V L); auto; lia).
  assert (Ha : (0 <= q (1 + length p)%nat a <= 1)%Q) by (apply (Hr (1 + length p)); [lia | auto]).
  assert (Hle : (qp q (p ++ [a]) <= qp q p)%Q).
  { unfold qp. rewrite qprod_snoc. fold (qp q p).
    assert (qp q p * q (1 + length p)%nat a <= qp q p * 1)%Q
      by (apply Qmult_le_compat_nonneg; split; lra).
    lra. }
  unfold prec, key. cbn [app lex_lt]. destruct (Qle_lt_or_eq _ _ Hle) as [L' | E].
  - left. lra.
  - right. split; [lra|]. left. apply qnat_lt. rewrite app_length. simpl. lia.
Qed.

Lemma Forall2_le_firstn : forall j (u' u : list nat), Forall2 le u' u -> Forall2 le (firstn j u') (firstn j u).
Proof.
  induction j; intros u' u H; [constructor|]. destruct H; simpl; constructor; auto.
Qed.

Lemma Forall2_le_length : forall (u' u : list nat), Forall2 le u' u -> length u' = length u.
Proof. intros u' u H. induction H; simpl; auto. Qed.

Lemma Forall2_qnat : forall (u' u : list nat), Forall2 le u' u -> Forall2 Qle (map qnat u') (map qnat u).
Proof. intros u' u H. induction H; simpl; constructor; auto. apply qnat_le; auto. Qed.

Lemma Forall2_qeq_qnat : forall (u' u : list nat), Forall2 Qeq (map qnat u') (map qnat u) -> u' = u.
Proof.
  induction u' as [|a u' IH]; intros [|b u] H; simpl in H; inversion H; subst; auto.
  f_equal; auto. apply qnat_inj; auto.
Qed.

Lemma Forall2_app_inv_Qeq : forall (a1 a2 b1 b2 : list Q), length a1 = length b1 ->
  Forall2 Qeq (a1 ++ a2) (b1 ++ b2) -> Forall2 Qeq a2 b2.
Proof.
  induction a1 as [|x a1 IH]; intros a2 [|y b1] b2 Hl H; simpl in *; try discriminate; auto.
  inversion H; subst. apply (IH a2 b1 b2); auto.
Qed.

(* Lemma 0.2: lowering some ranks (same depth, different prefix) comes first. *)
Theorem lemma0_lower_ranks : forall q V L u' u, ranked q V 1 L -> is_prefix V L u ->
  Forall2 le u' u -> u' <> u -> prec q u' u.
Proof.
  intros q V L u' u Hr [Hl Hf] H2 Hne. unfold prec, key.
  assert (Hlen : length u' = length u) by (apply Forall2_le_length; auto).
  assert (Mono : forall j, (qp q (firstn j u) <= qp q (firstn j u'))%Q).
  { intros j. unfold qp. apply (qprod_mono q V L); auto.
    - rewrite firstn_length. lia.
    - rewrite <- (firstn_skipn j u) in Hf. apply Forall_app in Hf. tauto.
    - apply Forall2_le_firstn; auto. }
  apply lex_le_neq.
  - rewrite Hlen. cbn [app]. constructor.
    + assert (Hfull := Mono (length u)). rewrite firstn_all in Hfull.
      rewrite <- Hlen in Hfull. rewrite firstn_all in Hfull. lra.
    + constructor; [lra|]. apply Forall2_app.
      * induction (rev (seq 1 (length u - 1))) as [|j js IH]; simpl; constructor; auto.
        specialize (Mono j). lra.
      * apply Forall2_qnat; auto.
  - intro E. apply Hne. apply Forall2_qeq_qnat.
    apply (Forall2_app_inv_Qeq ([(- qp q u')%Q; qnat (length u')] ++
            map (fun j => (- qp q (firstn j u'))%Q) (rev (seq 1 (length u' - 1))))
            _ ([(- qp q u)%Q; qnat (length u)] ++
            map (fun j => (- qp q (firstn j u))%Q) (rev (seq 1 (length u - 1))))).
    + simpl. rewrite !map_length. rewrite Hlen. reflexivity.
    + rewrite <- !app_assoc. exact E.
Qed.

(* Lemma 0.3: if p' ≺ p have the same depth, then p'·v ≺ p·v. *)
Definition key_tail (q : nat -> nat -> Q) (u : list nat) : list Q :=
  map (fun j => (- qp q (firstn j u))%Q) (rev (seq 1 (length u - 1))) ++ map qnat u.

Lemma key_split : forall q u, key q u = (- qp q u)%Q :: qnat (length u) :: key_tail q u.
Proof. reflexivity. Qed.

Lemma key_snoc : forall q p v, 1 <= length p ->
  key q (p ++ [v]) = (- qp q (p ++ [v]))%Q :: qnat (S (length p)) ::
                     (- qp q p)%Q :: key_tail q p ++ [qnat v].
Proof.
  intros q p v Hp.
  assert (F : forall j, j <= length p -> firstn j (p ++ [v]) = firstn j p).
  { intros j Hj. rewrite firstn_app. replace (j - length p) with 0 by lia.
    cbn [firstn]. apply app_nil_r. }
  assert (M : map (fun j => (- qp q (firstn j (p ++ [v])))%Q) (rev (seq 1 (length p - 1)))
            = map (fun j => (- qp q (firstn j p))%Q) (rev (seq 1 (length p - 1)))).
  { apply map_ext_in. intros j Hj. apply in_rev, in_seq in Hj. rewrite F by lia. reflexivity. }
  unfold key, key_tail. rewrite app_length. cbn [length].
  replace (length p + 1 - 1) with (S (length p - 1)) by lia.
  replace (length p + 1) with (S (length p)) by lia.
  rewrite seq_S, rev_app_distr. cbn [rev app map].
  replace (1 + (length p - 1)) with (length p) by lia.
  rewrite (F (length p) (le_n _)), firstn_all, M, map_app. cbn [map].
  rewrite <- app_assoc. reflexivity.
Qed.

Lemma lex_app_r : forall a b c, lex_lt a b -> lex_lt (a ++ c) (b ++ c).
Proof.
  induction a as [|x a IH]; intros [|y b] c H; simpl in *; try tauto.
  destruct H as [H | [E H]]; [left; auto | right; split; auto].
Qed.

Theorem lemma0_child_order : forall q V L p' p v, ranked q V 1 L ->
  is_prefix V L (p ++ [v]) -> is_prefix V L (p' ++ [v]) -> length p' = length p ->
  prec q p' p -> prec q (p' ++ [v]) (p ++ [v]).
Proof.
  intros q V L p' p v Hr [Hl Hf] [Hl' Hf'] Hlen H.
  rewrite app_length in Hl, Hl'. simpl in Hl, Hl'.
  apply Forall_app in Hf. destruct Hf as [Hfp Hfv]. inversion Hfv; subst.
  apply Forall_app in Hf'. destruct Hf' as [Hfp' _].
  destruct (Nat.eq_dec (length p) 0) as [Z | NZ].
  { (* depth-1 children of the root: p = p' = [], excluded by p' ≺ p *)
    destruct p; [|discriminate]. destruct p'; [|discriminate]. exfalso. exact (prec_irrefl q [] H). }
  unfold prec in *. rewrite !key_snoc by lia. rewrite !key_split in H. rewrite Hlen.
  assert (Hqv : (0 <= q (1 + length p)%nat v)%Q) by (apply (Hr (1 + length p)); [lia | auto]).
  assert (Hs : forall u, length u = length p -> (qp q (u ++ [v]) == qp q u * q (1 + length p)%nat v)%Q).
  { intros u Hu. unfold qp. rewrite qprod_snoc, Hu. reflexivity. }
  rewrite Hlen in H.
  destruct H as [H | [E H]].
  - (* q(p') > q(p) *)
    assert (Hle : (qp q p * q (1 + length p)%nat v <= qp q p' * q (1 + length p)%nat v)%Q)
      by (apply Qmult_le_compat_r; lra).
    pose proof (Hs p' Hlen) as E1. pose proof (Hs p eq_refl) as E2. cbn [lex_lt].
    destruct (Qle_lt_or_eq _ _ Hle) as [Lt | Eq]; [left; lra|].
    right. split; [lra|]. right. split; [reflexivity|]. left. exact H.
  - (* equal scores and depths: the parents' remaining keys decide *)
    destruct H as [H | [_ H]]; [exfalso; apply (Qlt_irrefl _ H)|].
    assert (Eq : (qp q p' * q (1 + length p)%nat v == qp q p * q (1 + length p)%nat v)%Q)
      by (assert (qp q p' == qp q p)%Q by lra; rewrite H0; reflexivity).
    pose proof (Hs p' Hlen) as E1. pose proof (Hs p eq_refl) as E2. cbn [lex_lt].
    right. split; [lra|]. right. split; [reflexivity|]. right. split; [exact E|].
    apply lex_app_r. exact H.
Qed.

(* ---------- the exchange argument ---------- *)

Lemma In_firstn : forall A n (l : list A) y, In y (firstn n l) -> In y l.
Proof. intros A n l y H. rewrite <- (firstn_skipn n l). apply in_or_app. auto. Qed.

Lemma StronglySorted_app_rel : forall A (R : A -> A -> Prop) l1 l2 a b,
  StronglySorted R (l1 ++ l2) -> In a l1 -> In b l2 -> R a b.
Proof.
  induction l1 as [|x l1 IH]; intros l2 a b H Ha Hb; [destruct Ha|].
  apply StronglySorted_inv in H. destruct H as [H HF]. destruct Ha as [<- | Ha].
  - rewrite Forall_forall in HF. apply HF. apply in_or_app. auto.
  - eapply IH; eauto.
Qed.

Theorem topN_optimal : forall A (dec : forall x y : A, {x = y} + {x <> y})
  (R : A -> A -> Prop) (f : A -> Q) (l : list A) N T,
  (forall x y, R x y -> (f y <= f x)%Q) -> StronglySorted R l ->
  (forall x, In x l -> (0 <= f x)%Q) ->
  NoDup T -> incl T l -> length T <= N ->
  (qsum f T <= qsum f (firstn N l))%Q.
Proof.
  intros A dec R f l. induction l as [|x l IH]; intros N T HR HS Hn ND Hi HN.
  - destruct T as [|t T]; [rewrite firstn_nil; apply Qle_refl|]. exfalso. apply (Hi t). left; auto.
  - destruct N as [|N].
    + destruct T; [apply Qle_refl | simpl in HN; lia].
    + pose proof HS as HS'. apply StronglySorted_inv in HS'. destruct HS' as [HSl HF].
      rewrite Forall_forall in HF.
      cbn [firstn]. rewrite qsum_cons.
      assert (Hn' : forall y, In y l -> (0 <= f y)%Q) by (intros; apply Hn; right; auto).
      destruct (in_dec dec x T) as [Hx | Hx].
      * destruct (in_split _ _ Hx) as (T1 & T2 & ->).
        rewrite <- (qsum_perm _ f _ _ (Permutation_middle T1 T2 x)), qsum_cons.
        assert (IHapp : (qsum f (T1 ++ T2) <= qsum f (firstn N l))%Q).
        { apply IH; auto.
          - eapply NoDup_remove_1; eauto.
          - intros y Hy. assert (Hyx : y <> x).
            { intro E; subst. apply (NoDup_remove_2 _ _ _ ND). auto. }
            assert (In y (x :: l)).
            { apply Hi. apply in_app_or in Hy. apply in_or_app. destruct Hy; [left | right; right]; auto. }
            destruct H; [congruence | auto].
          - rewrite app_length in *. simpl in HN. lia. }
        lra.
      * destruct T as [|w T'].
        -- change (qsum f []) with 0%Q.
           assert (0 <= f x)%Q by (apply Hn; left; auto).
           assert (0 <= qsum f (firstn N l))%Q.
           { apply qsum_nonneg. intros y Hy. apply Hn'. eapply In_firstn; eauto. }
           lra.
        -- inversion ND as [|? ? Hw ND']; subst.
           assert (Hwl : In w l).
           { destruct (Hi w (or_introl eq_refl)) as [E | E]; [subst; exfalso; apply Hx; left; auto | auto]. }
           assert (f w <= f x)%Q by (apply HR, HF; auto).
           assert (IHT : (qsum f T' <= qsum f (firstn N l))%Q).
           { apply IH; auto.
             - intros y Hy. destruct (Hi y (or_intror Hy)) as [E | E]; [subst; exfalso; apply Hx; right; auto | auto].
             - simpl in HN. lia. }
           rewrite qsum_cons. lra.
Qed.

(* ---------- Proposition 2 ---------- *)

(* ord lists every prefix of depth 1..L over {0..V-1} exactly once. *)
Definition enumerates (V L : nat) (ord : list (list nat)) : Prop :=
  NoDup ord /\ (forall u, In u ord <-> is_prefix V L u).

Lemma NoDup_app_l : forall A (l1 l2 : list A), NoDup (l1 ++ l2) -> NoDup l1.
Proof.
  induction l1 as [|x l1 IH]; intros l2 H; [constructor|]. inversion H; subst.
  constructor; [intro; apply H2, in_or_app; auto | eapply IH; eauto].
Qed.

Lemma prefix_parent : forall V L p a, is_prefix V L (p ++ [a]) -> p <> [] -> is_prefix V L p.
Proof.
  intros V L p a [Hl Hf] Hne. rewrite app_length in Hl. simpl in Hl.
  apply Forall_app in Hf. split; [|tauto]. destruct p; [contradiction|]. simpl in *. lia.
Qed.

(* DDTree Proposition 2 (ddtree.md §3), exact arithmetic: T_N = the first N prefixes in ≺
   is a valid tree with min(N, P) nodes (P = |ord| = number of prefixes), and its sum of
   prefix probabilities is at least that of every set of at most N prefixes. *)
Theorem ddtree_proposition2 : forall q V L N ord,
  ranked q V 1 L -> enumerates V L ord -> StronglySorted (prec q) ord ->
  valid (firstn N ord) /\ NoDup (firstn N ord) /\
  length (firstn N ord) = Nat.min N (length ord) /\
  (forall T, NoDup T -> (forall u, In u T -> is_prefix V L u) -> length T <= N ->
     (qsum (qp q) T <= qsum (qp q) (firstn N ord))%Q).
Proof.
  intros q V L N ord Hr [ND Hord] HS. split; [|split; [|split]].
  - intros p a Hu Hne.
    assert (Hpu : is_prefix V L (p ++ [a])) by (apply Hord; eapply In_firstn; eauto).
    assert (Hp : In p ord) by (apply Hord; eapply prefix_parent; eauto).
    rewrite <- (firstn_skipn N ord) in Hp, HS. apply in_app_or in Hp. destruct Hp as [Hp | Hp]; auto.
    exfalso. apply (prec_asym q p (p ++ [a])).
    + eapply lemma0_parent; eauto.
    + eapply StronglySorted_app_rel; eauto.
  - rewrite <- (firstn_skipn N ord) in ND. eapply NoDup_app_l; eauto.
  - apply firstn_length.
  - intros T NDT HT HN. apply (topN_optimal _ path_eq_dec (prec q)); auto.
    + apply prec_score.
    + intros u Hu. apply Hord in Hu. destruct Hu as [Hl Hf].
      apply (qprod_nonneg q V L); auto; lia.
    + intros u Hu. apply Hord. auto.
Qed.

(* ---------- Lemma 1 ---------- *)

Fixpoint upd (l : list nat) (i k : nat) : list nat :=
  match l, i with
  | [], _ => []
  | _ :: l', 0 => k :: l'
  | x :: l', S i' => x :: upd l' i' k
  end.

Lemma upd_length : forall l i k, length (upd l i k) = length l.
Proof. induction l; intros [|i] k; simpl; auto. Qed.

Lemma upd_nth : forall l i k, i < length l -> nth i (upd l i k) 0 = k.
Proof. induction l; intros [|i] k H; simpl in *; auto; try lia. apply IHl. lia. Qed.

Lemma Forall2_le_refl : forall l, Forall2 le l l.
Proof. induction l; constructor; auto. Qed.

Lemma upd_le : forall l i k, k <= nth i l 0 -> Forall2 le (upd l i k) l.
Proof.
  induction l as [|x l IH]; intros [|i] k H; simpl in *; try constructor; auto.
  apply Forall2_le_refl.
Qed.

Lemma upd_bound : forall V l i k, Forall (fun v => v < V) l -> k < V -> Forall (fun v => v < V) (upd l i k).
Proof.
  intros V. induction l as [|x l IH]; intros [|i] k H Hk; simpl; auto; inversion H; subst; constructor; auto.
Qed.

Lemma NoDup_map_inj : forall (f : nat -> list nat) l,
  (forall x y, In x l -> In y l -> f x = f y -> x = y) -> NoDup l -> NoDup (map f l).
Proof.
  intros f l Hinj ND. induction ND as [|x l Hx ND IH]; simpl; constructor.
  - intro H. apply in_map_iff in H. destruct H as (y & E & Hy).
    assert (y = x) by (apply Hinj; simpl; auto). subst. contradiction.
  - apply IH. intros; apply Hinj; simpl; auto.
Qed.

(* DDTree Lemma 1 (ddtree.md §4): every prefix of T_N uses only ranks < K = min(N, V). *)
Theorem ddtree_lemma1 : forall q V L N ord,
  ranked q V 1 L -> enumerates V L ord -> StronglySorted (prec q) ord ->
  forall u, In u (firstn N ord) -> Forall (fun v => v < Nat.min N V) u.
Proof.
  intros q V L N ord Hr [ND Hord] HS u Hu.
  assert (Hpu : is_prefix V L u) by (apply Hord; eapply In_firstn; eauto).
  pose proof Hpu as [Hl Hf].
  apply Forall_forall. intros v Hv.
  assert (HvV : v < V) by (rewrite Forall_forall in Hf; auto).
  destruct (lt_dec v N) as [HvN | HvN]; [lia|]. exfalso.
  destruct (In_nth u v 0 Hv) as (i & Hi & Hiv).
  set (K := map (fun k => upd u i k) (seq 0 N)).
  assert (NDK : NoDup K).
  { apply NoDup_map_inj; [|apply seq_NoDup].
    intros x y _ _ E. rewrite <- (upd_nth u i x), <- (upd_nth u i y) by auto. rewrite E. reflexivity. }
  assert (Before : forall w, In w K -> prec q w u).
  { intros w Hw. apply in_map_iff in Hw. destruct Hw as (k & <- & Hk). apply in_seq in Hk.
    apply (lemma0_lower_ranks q V L); auto.
    - apply upd_le. lia.
    - intro E. assert (nth i (upd u i k) 0 = nth i u 0) by (rewrite E; reflexivity).
      rewrite upd_nth in H by auto. lia. }
  destruct (in_split _ _ Hu) as (A1 & A2 & HA).
  assert (Hord' : ord = (A1 ++ [u]) ++ (A2 ++ skipn N ord)).
  { rewrite <- (firstn_skipn N ord) at 1. rewrite HA. rewrite <- !app_assoc. reflexivity. }
  assert (Inc : incl K A1).
  { intros w Hw. assert (Hwu := Before w Hw).
    assert (Hwo : In w ord).
    { apply Hord. apply in_map_iff in Hw. destruct Hw as (k & <- & Hk). apply in_seq in Hk.
      split; [rewrite upd_length; auto|]. apply upd_bound; auto. lia. }
    rewrite Hord' in Hwo. apply in_app_or in Hwo. destruct Hwo as [Hwo | Hwo].
    - apply in_app_or in Hwo. destruct Hwo as [Hwo | [E | []]]; auto.
      exfalso. rewrite <- E in Hwu. exact (prec_irrefl q u Hwu).
    - exfalso. apply (prec_asym q w u); auto.
      rewrite Hord' in HS. eapply StronglySorted_app_rel; eauto. apply in_or_app. right. left. auto. }
  pose proof (NoDup_incl_length NDK Inc) as HK.
  unfold K in HK. rewrite map_length, seq_length in HK.
  pose proof (firstn_le_length N ord) as HN. rewrite HA, app_length in HN. simpl in HN. lia.
Qed.

(* ---------- the order exists (and is unique): the hypotheses above are satisfiable ---------- *)

Lemma lex_lt_dec : forall a b, {lex_lt a b} + {~ lex_lt a b}.
Proof.
  induction a as [|x a IH]; intros [|y b]; simpl; auto.
  destruct (Qlt_le_dec x y) as [L | L]; [left; left; auto|].
  destruct (Qeq_dec x y) as [E | E].
  - destruct (IH b) as [H | H]; [left; right; auto | right; intros [H' | [_ H']]; [lra | auto]].
  - right. intros [H' | [H' _]]; [lra | auto].
Qed.

Lemma lex_trichotomy : forall a b, length a = length b -> lex_lt a b \/ lex_lt b a \/ Forall2 Qeq a b.
Proof.
  induction a as [|x a IH]; intros [|y b] Hl; simpl in Hl; try discriminate.
  - right; right; constructor.
  - destruct (Q_dec x y) as [[L | L] | E].
    + left. left. auto.
    + right. left. left. auto.
    + destruct (IH b ltac:(lia)) as [H | [H | H]].
      * left. right. auto.
      * right. left. right. split; [symmetry; auto | auto].
      * right. right. constructor; auto.
Qed.

Lemma key_length : forall q u, length (key q u) = 2 + (length u - 1) + length u.
Proof.
  intros. unfold key. rewrite !app_length, !map_length, rev_length, seq_length. reflexivity.
Qed.

Theorem prec_total : forall q u w, u <> w -> prec q u w \/ prec q w u.
Proof.
  intros q u w Hne. unfold prec.
  destruct (Nat.eq_dec (length u) (length w)) as [E | E].
  - destruct (lex_trichotomy (key q u) (key q w)) as [H | [H | H]]; auto.
    + rewrite !key_length. lia.
    + exfalso. apply Hne. apply Forall2_qeq_qnat.
      unfold key in H. rewrite !app_assoc in H.
      eapply Forall2_app_inv_Qeq; [|exact H].
      rewrite !app_length, !map_length, !rev_length, !seq_length, E. reflexivity.
  - unfold key. cbn [app lex_lt].
    destruct (Q_dec (- qp q u) (- qp q w))%Q as [[L | L] | Eq]; auto.
    destruct (Nat.lt_gt_cases (length u) (length w)) as [[Lt | Gt] _]; [auto| |].
    + left. right. split; auto. left. apply qnat_lt. auto.
    + right. right. split; [symmetry; auto|]. left. apply qnat_lt. lia.
Qed.

Fixpoint insert (q : nat -> nat -> Q) (x : list nat) (l : list (list nat)) : list (list nat) :=
  match l with
  | [] => [x]
  | y :: l' => if lex_lt_dec (key q x) (key q y) then x :: y :: l' else y :: insert q x l'
  end.

Definition isort (q : nat -> nat -> Q) (l : list (list nat)) : list (list nat) :=
  fold_right (insert q) [] l.

Lemma insert_perm : forall q x l, Permutation (insert q x l) (x :: l).
Proof.
  intros q x l. induction l as [|y l IH]; simpl; auto.
  destruct (lex_lt_dec (key q x) (key q y)); auto.
  eapply perm_trans; [apply perm_skip, IH | apply perm_swap].
Qed.

Lemma isort_perm : forall q l, Permutation (isort q l) l.
Proof.
  intros q l. induction l as [|x l IH]; simpl; auto.
  eapply perm_trans; [apply insert_perm | apply perm_skip, IH].
Qed.

Lemma insert_sorted : forall q x l, StronglySorted (prec q) l -> ~ In x l ->
  StronglySorted (prec q) (insert q x l).
Proof.
  intros q x l. induction l as [|y l IH]; intros HS Hx; simpl.
  - repeat constructor.
  - apply StronglySorted_inv in HS. destruct HS as [HS HF].
    destruct (lex_lt_dec (key q x) (key q y)) as [L | L].
    + constructor; [constructor; auto|]. constructor; [exact L|].
      rewrite Forall_forall in *. intros z Hz. eapply prec_trans; [exact L | apply HF; auto].
    + assert (Hyx : prec q y x).
      { destruct (prec_total q x y) as [H | H]; [intro E; apply Hx; left; auto | contradiction | auto]. }
      constructor; [apply IH; auto; intro; apply Hx; right; auto|].
      rewrite Forall_forall in *. intros z Hz.
      apply (Permutation_in _ (insert_perm q x l)) in Hz. destruct Hz as [<- | Hz]; auto.
Qed.

Lemma isort_sorted : forall q l, NoDup l -> StronglySorted (prec q) (isort q l).
Proof.
  intros q l ND. induction ND as [|x l Hx ND IH]; simpl; [constructor|].
  apply insert_sorted; auto. intro H. apply Hx.
  apply (Permutation_in _ (isort_perm q l)). auto.
Qed.

(* The explicit enumeration of the prefixes. *)
Definition prefixes (V L : nat) : list (list nat) := flat_map (seqs V) (seq 1 L).

Lemma seqs_spec : forall V n y, In y (seqs V n) <-> length y = n /\ Forall (fun v => v < V) y.
Proof.
  intros V. induction n as [|n IH]; intros y; simpl.
  - split; [intros [<- | []]; split; auto|]. intros [H _]. destruct y; [auto | discriminate].
  - rewrite in_flat_map. split.
    + intros (v & Hv & Hy). apply in_map_iff in Hy. destruct Hy as (y' & <- & Hy').
      apply IH in Hy'. apply in_seq in Hv. simpl. split; [f_equal; tauto|]. constructor; [lia | tauto].
    + intros [Hl Hf]. destruct y as [|v y']; [discriminate|]. inversion Hf; subst.
      exists v. split; [apply in_seq; lia|]. apply in_map. apply IH. split; auto.
Qed.

Lemma NoDup_app_gen : forall A (l1 l2 : list A), NoDup l1 -> NoDup l2 ->
  (forall x, In x l1 -> ~ In x l2) -> NoDup (l1 ++ l2).
Proof.
  induction l1 as [|a l1 IH]; intros l2 N1 N2 Hd; simpl; auto.
  inversion N1; subst. constructor.
  - intro Hin. apply in_app_or in Hin. destruct Hin; [contradiction|]. apply (Hd a); simpl; auto.
  - apply IH; auto. intros x Hx. apply Hd. simpl; auto.
Qed.

Lemma NoDup_flat_map_gen : forall A B (f : A -> list B) l, NoDup l ->
  (forall x, In x l -> NoDup (f x)) ->
  (forall x y z, In x l -> In y l -> x <> y -> In z (f x) -> In z (f y) -> False) ->
  NoDup (flat_map f l).
Proof.
  intros A B f l ND. induction ND as [|x l Hx ND IH]; intros H1 H2; simpl; [constructor|].
  apply NoDup_app_gen.
  - apply H1. left; auto.
  - apply IH; [intros; apply H1; right; auto | intros; eapply H2; eauto; right; auto].
  - intros z Hz Hz'. apply in_flat_map in Hz'. destruct Hz' as (y & Hy & Hz').
    apply (H2 x y z); auto; [left; auto | right; auto | intro; subst; contradiction].
Qed.

Lemma seqs_NoDup : forall V n, NoDup (seqs V n).
Proof.
  intros V. induction n as [|n IH]; simpl; [repeat constructor; auto|].
  apply NoDup_flat_map_gen; [apply seq_NoDup | |].
  - intros v _. induction IH as [|y l Hy ND IH']; simpl; constructor; auto.
    intro H. apply in_map_iff in H. destruct H as (y' & E & Hy'). inversion E; subst. contradiction.
  - intros v w z _ _ Hvw Hv Hw. apply in_map_iff in Hv, Hw.
    destruct Hv as (y & <- & _). destruct Hw as (y' & E & _). inversion E. auto.
Qed.

Lemma prefixes_enumerates : forall V L, enumerates V L (prefixes V L).
Proof.
  intros V L. split.
  - apply NoDup_flat_map_gen; [apply seq_NoDup | intros; apply seqs_NoDup|].
    intros d e z _ _ Hde Hd He. apply seqs_spec in Hd, He. lia.
  - intros u. unfold prefixes. rewrite in_flat_map. split.
    + intros (d & Hd & Hu). apply in_seq in Hd. apply seqs_spec in Hu. split; [lia | tauto].
    + intros [Hl Hf]. exists (length u). split; [apply in_seq; lia | apply seqs_spec; auto].
Qed.

(* The list "all prefixes in the order ≺" exists: sort the enumeration. *)
Theorem existence_of_the_order : forall q V L,
  enumerates V L (isort q (prefixes V L)) /\ StronglySorted (prec q) (isort q (prefixes V L)).
Proof.
  intros q V L. destruct (prefixes_enumerates V L) as [ND Hin]. split; [split|].
  - eapply Permutation_NoDup; [symmetry; apply isort_perm | auto].
  - intros u. rewrite <- Hin. split; apply Permutation_in; [|symmetry]; apply isort_perm.
  - apply isort_sorted; auto.
Qed.

(* ... and it is unique, so "the first N prefixes in ≺" is well defined. *)
Theorem uniqueness_of_the_order : forall q (l1 l2 : list (list nat)),
  NoDup l1 -> NoDup l2 -> (forall u, In u l1 <-> In u l2) ->
  StronglySorted (prec q) l1 -> StronglySorted (prec q) l2 -> l1 = l2.
Proof.
  intros q l1. induction l1 as [|x l1 IH]; intros [|y l2] N1 N2 Hin S1 S2.
  - reflexivity.
  - exfalso. apply (Hin y). left; auto.
  - exfalso. apply (Hin x). left; auto.
  - apply StronglySorted_inv in S1. destruct S1 as [S1 F1].
    apply StronglySorted_inv in S2. destruct S2 as [S2 F2].
    rewrite Forall_forall in F1, F2.
    assert (Exy : x = y).
    { destruct (path_eq_dec x y) as [E | E]; auto. exfalso.
      assert (Hx : In x l2) by (destruct (proj1 (Hin x) (or_introl eq_refl)); [congruence | auto]).
      assert (Hy : In y l1) by (destruct (proj2 (Hin y) (or_introl eq_refl)); [congruence | auto]).
      apply (prec_asym q x y); auto. }
    subst y. inversion N1; inversion N2; subst. f_equal. apply IH; auto.
    intros u. split; intros Hu.
    + destruct (proj1 (Hin u) (or_intror Hu)) as [E | E]; [subst; contradiction | auto].
    + destruct (proj2 (Hin u) (or_intror Hu)) as [E | E]; [subst; contradiction | auto].
Qed.
