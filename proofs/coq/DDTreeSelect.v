(* DDTreeSelect.v -- the DDTree selection as a program that Coq can run (`Compute`,
   `Eval vm_compute`), proved equal to the order-based specification of DDTreeOrder.v
   (issue 39 items 2 and 4; rows DD2, DD3, DD5 and DD10 of proofs/README.md).

   Map to the rows of proofs/README.md:
   - DD2 : lexb_spec             (the boolean lexicographic comparison decides lex_lt)
           precb_spec            (precb q u w = true <-> prec q u w)
           first_n_prefixes_spec (the computable first_n_prefixes q V L N -- insertion sort
                                  of all prefixes by precb, then firstn N -- equals firstn N
                                  ord for every list ord of all prefixes sorted by prec)
           select_spec           (select tbl V L N, on a raw marginal table with tokens in
                                  any order, = the first N rank tuples in prec for the ranked
                                  table, mapped back to tokens)
           ranked_rq             (the ranked table satisfies DDTreeOrder's hypothesis)
           select_proposition2   (Proposition 2 for select, in token space: a valid,
                                  duplicate-free tree of min(N, P) prefixes whose sum of q(u)
                                  is >= that of every duplicate-free set of <= N prefixes)
           ddtree_optimal_expected_acceptance (Propositions 1 + 2 composed: the first N
                                  prefixes in the order maximise E_{Y~Q}[alpha_T(Y)] over all
                                  valid trees T of <= N nodes)
           select_maximises_expected_acceptance (the same for select on a raw table)
   - DD3 : select_lemma1         (every selected token has rank < min(N, V) at its depth)
           lemma1_at_depth       (the first N prefixes of one depth only use ranks < N)
   - DD5 : levels_select_spec    (the level-synchronous algorithm -- level d = the best N
                                  children of rank < min(N, V) of level d-1, then the best N
                                  of all levels -- returns first_n_prefixes, in order)
           level_spec            (level d = the first N depth-d prefixes in the order)
           select_levels_spec    (the same on a raw table: select_levels = select)
   - DD10: prune_initial_segment (pruning q(u) < tau, first node kept, leaves an initial
                                  segment of the order)
           prune_valid           (hence a valid, duplicate-free tree)
           prune_loss            (the pruned-away mass is <= (|l| - 1) * tau)

   Model (see proofs/README.md, "Machine-checked (Coq)"):
   - a marginal table is tbl : list (list Q); tbl[d-1][v] = q_d(v), d = 1..L, v < V; exact
     rationals in [0, 1] (no float32, no logarithms: the order by -q is the order by
     -log q);
   - ranks are specjax's: at each depth the tokens sorted by "q descending, token id
     ascending" (rank_row); rq tbl d r = q_d(token of rank r) is the ranked table;
   - the order on rank tuples is DDTreeOrder's prec (key (-q(u), |u|, -q(u_1..u_{d-1}),
     ..., -q(u_1), r_1, ..., r_d), lexicographic), which is rules (1)-(4) of the comment in
     specjax/drafters/ddtree.py with exact q(u) for the float32 sigma; the Coq key and the
     Python rule agree component for component;
   - tests/test_coq_select_tree.py evaluates select and select_levels with vm_compute on
     random small tables and compares them with specjax's select_tree. *)

From Coq Require Import List Arith Lia QArith Lqa Sorted Permutation Bool.
From Specjax Require Import GreedyWalk QSums DDTreeSurrogate DDTreeOrder.
Import ListNotations.
Local Open Scope nat_scope.

(* ---------- a generic insertion sort with a boolean comparison ---------- *)

Fixpoint binsert {A : Type} (lt : A -> A -> bool) (x : A) (l : list A) : list A :=
  match l with
  | [] => [x]
  | y :: l' => if lt x y then x :: y :: l' else y :: binsert lt x l'
  end.

Definition bsort {A : Type} (lt : A -> A -> bool) (l : list A) : list A :=
  fold_right (binsert lt) [] l.

Lemma binsert_perm : forall A (lt : A -> A -> bool) x l, Permutation (binsert lt x l) (x :: l).
Proof.
  intros A lt x l. induction l as [|y l IH]; simpl; auto.
  destruct (lt x y); auto. eapply perm_trans; [apply perm_skip, IH | apply perm_swap].
Qed.

Lemma bsort_perm : forall A (lt : A -> A -> bool) l, Permutation (bsort lt l) l.
Proof.
  intros A lt l. induction l as [|x l IH]; simpl; auto.
  eapply perm_trans; [apply binsert_perm | apply perm_skip, IH].
Qed.

Definition btrans {A : Type} (lt : A -> A -> bool) : Prop :=
  forall x y z, lt x y = true -> lt y z = true -> lt x z = true.

Definition btotal {A : Type} (lt : A -> A -> bool) : Prop :=
  forall x y, x <> y -> lt x y = true \/ lt y x = true.

Lemma binsert_sorted : forall A (lt : A -> A -> bool) x l, btrans lt -> btotal lt ->
  StronglySorted (fun a b => lt a b = true) l -> ~ In x l ->
  StronglySorted (fun a b => lt a b = true) (binsert lt x l).
Proof.
  intros A lt x l Ht Hto. induction l as [|y l IH]; intros HS Hx; simpl.
  - repeat constructor.
  - apply StronglySorted_inv in HS. destruct HS as [HS HF].
    destruct (lt x y) eqn:L.
    + constructor; [constructor; auto|]. constructor; [exact L|].
      rewrite Forall_forall in *. intros z Hz. eapply Ht; [exact L | apply HF; auto].
    + assert (Hyx : lt y x = true).
      { destruct (Hto x y) as [H | H]; [intro E; apply Hx; left; auto | congruence | auto]. }
      constructor; [apply IH; auto; intro; apply Hx; right; auto|].
      rewrite Forall_forall in *. intros z Hz.
      apply (Permutation_in _ (binsert_perm A lt x l)) in Hz. destruct Hz as [<- | Hz]; auto.
Qed.

Lemma bsort_sorted : forall A (lt : A -> A -> bool) l, btrans lt -> btotal lt -> NoDup l ->
  StronglySorted (fun a b => lt a b = true) (bsort lt l).
Proof.
  intros A lt l Ht Hto ND. induction ND as [|x l Hx ND IH]; simpl; [constructor|].
  apply binsert_sorted; auto. intro H. apply Hx.
  apply (Permutation_in _ (bsort_perm A lt l)). auto.
Qed.

Lemma StronglySorted_impl : forall A (R S : A -> A -> Prop) l,
  (forall x y, R x y -> S x y) -> StronglySorted R l -> StronglySorted S l.
Proof.
  intros A R S l H HS. induction HS as [|x l HS IH HF]; constructor; auto.
  eapply Forall_impl; [|exact HF]. auto.
Qed.

Lemma StronglySorted_nth : forall A (R : A -> A -> Prop) (l : list A) d i j,
  StronglySorted R l -> i < j -> j < length l -> R (nth i l d) (nth j l d).
Proof.
  intros A R l d. induction l as [|x l IH]; intros i j HS Hij Hj; [simpl in Hj; lia|].
  apply StronglySorted_inv in HS. destruct HS as [HS HF]. rewrite Forall_forall in HF.
  destruct i as [|i]; destruct j as [|j]; try lia; simpl in *.
  - apply HF. apply nth_In. lia.
  - apply IH; auto; lia.
Qed.

(* ---------- the order on prefixes, decided by a boolean program ---------- *)

Fixpoint lexb (a b : list Q) : bool :=
  match a, b with
  | x :: a', y :: b' => if Qle_bool y x then Qeq_bool x y && lexb a' b' else true
  | _, _ => false
  end.

Theorem lexb_spec : forall a b, lexb a b = true <-> lex_lt a b.
Proof.
  induction a as [|x a IH]; intros [|y b]; simpl; try (split; [discriminate | tauto]).
  destruct (Qle_bool y x) eqn:E.
  - apply Qle_bool_iff in E. rewrite andb_true_iff, Qeq_bool_iff, IH. split.
    + intros [E1 H]. right. auto.
    + intros [H | [E1 H]]; [lra | auto].
  - assert (x < y)%Q by (apply Qnot_le_lt; intro H; apply Qle_bool_iff in H; congruence).
    split; auto.
Qed.

(* A transparent decision procedure (DDTreeOrder.lex_lt_dec ends in Qed). *)
Definition lex_lt_decT (a b : list Q) : {lex_lt a b} + {~ lex_lt a b}.
Proof.
  destruct (lexb a b) eqn:E; [left; apply lexb_spec; exact E|].
  right. intro H. apply lexb_spec in H. congruence.
Defined.

Definition precb (q : nat -> nat -> Q) (u w : list nat) : bool := lexb (key q u) (key q w).

Theorem precb_spec : forall q u w, precb q u w = true <-> prec q u w.
Proof. intros. apply lexb_spec. Qed.

Lemma precb_trans : forall q, btrans (precb q).
Proof.
  intros q x y z H1 H2. apply precb_spec in H1, H2. apply precb_spec. eapply prec_trans; eauto.
Qed.

Lemma precb_total : forall q, btotal (precb q).
Proof.
  intros q x y Hne. rewrite !precb_spec. apply prec_total. auto.
Qed.

(* ---------- the first N prefixes in the order, computed ---------- *)

Definition sorted_prefixes (q : nat -> nat -> Q) (V L : nat) : list (list nat) :=
  bsort (precb q) (prefixes V L).

Definition first_n_prefixes (q : nat -> nat -> Q) (V L N : nat) : list (list nat) :=
  firstn N (sorted_prefixes q V L).

Lemma sorted_prefixes_order : forall q V L,
  enumerates V L (sorted_prefixes q V L) /\ StronglySorted (prec q) (sorted_prefixes q V L).
Proof.
  intros q V L. destruct (prefixes_enumerates V L) as [ND Hin]. unfold sorted_prefixes.
  split; [split|].
  - eapply Permutation_NoDup; [symmetry; apply bsort_perm | auto].
  - intros u. rewrite <- Hin. split; apply Permutation_in; [|symmetry]; apply bsort_perm.
  - eapply StronglySorted_impl; [|apply bsort_sorted; auto using precb_trans, precb_total].
    intros x y H. apply precb_spec. exact H.
Qed.

(* The program computes the specification: for every list ord that enumerates the prefixes
   and is sorted by ≺ (the hypotheses of ddtree_proposition2 and ddtree_lemma1),
   first_n_prefixes = firstn N ord. *)
Theorem first_n_prefixes_spec : forall q V L N ord,
  enumerates V L ord -> StronglySorted (prec q) ord ->
  first_n_prefixes q V L N = firstn N ord.
Proof.
  intros q V L N ord [ND Hin] HS. unfold first_n_prefixes. f_equal.
  destruct (sorted_prefixes_order q V L) as [[ND' Hin'] HS'].
  apply (uniqueness_of_the_order q); auto. intros u. rewrite Hin, Hin'. tauto.
Qed.

Corollary first_n_prefixes_isort : forall q V L N,
  first_n_prefixes q V L N = firstn N (isort q (prefixes V L)).
Proof.
  intros. destruct (existence_of_the_order q V L). apply first_n_prefixes_spec; auto.
Qed.

Corollary first_n_prefixes_proposition2 : forall q V L N,
  ranked q V 1 L ->
  let T := first_n_prefixes q V L N in
  valid T /\ NoDup T /\ length T = Nat.min N (length (prefixes V L)) /\
  (forall T', NoDup T' -> (forall u, In u T' -> is_prefix V L u) -> length T' <= N ->
     (qsum (qp q) T' <= qsum (qp q) T)%Q) /\
  (forall u, In u T -> Forall (fun v => v < Nat.min N V) u).
Proof.
  intros q V L N Hr T. destruct (sorted_prefixes_order q V L) as [He HS].
  assert (Hl : length (sorted_prefixes q V L) = length (prefixes V L)).
  { apply Permutation_length, bsort_perm. }
  destruct (ddtree_proposition2 q V L N _ Hr He HS) as (H1 & H2 & H3 & H4).
  unfold T, first_n_prefixes. rewrite <- Hl. split; [|split; [|split; [|split]]]; auto.
  intros u Hu. eapply ddtree_lemma1; eauto.
Qed.

(* ---------- raw marginal tables: ranks as specjax computes them ---------- *)

(* tbl[d-1][v] = q_d(v); entries past the end of a row read as 0. *)
Definition row (tbl : list (list Q)) (d : nat) : list Q := nth (d - 1) tbl [].
Definition qt (tbl : list (list Q)) (d v : nat) : Q := nth v (row tbl d) 0%Q.

(* Token v is ranked before token w: q(v) > q(w), or equal and v < w (specjax's top_k). *)
Definition tok_before (r : list Q) (v w : nat) : bool :=
  let a := nth v r 0%Q in let b := nth w r 0%Q in
  if Qle_bool a b then Qeq_bool a b && Nat.ltb v w else true.

Lemma tok_before_spec : forall r v w, tok_before r v w = true <->
  (nth w r 0 < nth v r 0)%Q \/ ((nth v r 0 == nth w r 0)%Q /\ v < w).
Proof.
  intros r v w. unfold tok_before. destruct (Qle_bool _ _) eqn:E.
  - apply Qle_bool_iff in E. rewrite andb_true_iff, Qeq_bool_iff, Nat.ltb_lt.
    split; [tauto|]. intros [H | H]; [lra | tauto].
  - assert (~ (nth v r 0 <= nth w r 0)%Q) by (intro H; apply Qle_bool_iff in H; congruence).
    split; [intros _; left; lra | auto].
Qed.

Lemma tok_before_trans : forall r, btrans (tok_before r).
Proof.
  intros r x y z H1 H2. apply tok_before_spec in H1, H2. apply tok_before_spec.
  destruct H1 as [H1 | [H1 H1']]; destruct H2 as [H2 | [H2 H2']].
  - left; lra.
  - left; lra.
  - left; lra.
  - right; split; [lra | lia].
Qed.

Lemma tok_before_total : forall r, btotal (tok_before r).
Proof.
  intros r x y Hne. rewrite !tok_before_spec.
  destruct (Q_dec (nth x r 0%Q) (nth y r 0%Q)) as [[H | H] | H]; auto.
  destruct (Nat.lt_gt_cases x y) as [[H' | H'] _]; [lia| |]; auto.
  right. right. split; [symmetry; auto | auto].
Qed.

(* The tokens of one depth in rank order (rank k = position k). *)
Definition rank_row (r : list Q) (V : nat) : list nat := bsort (tok_before r) (seq 0 V).

Definition tok (tbl : list (list Q)) (V d k : nat) : nat := nth k (rank_row (row tbl d) V) 0.

(* The ranked table: rq d k = q_d(token of rank k). *)
Definition rq (tbl : list (list Q)) (V d k : nat) : Q := qt tbl d (tok tbl V d k).

Fixpoint to_tokens (tbl : list (list Q)) (V k : nat) (u : list nat) : list nat :=
  match u with
  | [] => []
  | a :: u' => tok tbl V k a :: to_tokens tbl V (S k) u'
  end.

(* The DDTree selection on a raw table: the first N rank tuples in ≺ (scored by rq), as
   token tuples, in selection order. *)
Definition select (tbl : list (list Q)) (V L N : nat) : list (list nat) :=
  map (to_tokens tbl V 1) (first_n_prefixes (rq tbl V) V L N).

Definition table_ok (tbl : list (list Q)) (V L : nat) : Prop :=
  forall d, 1 <= d <= L -> forall v, v < V -> (0 <= qt tbl d v <= 1)%Q.

Lemma rank_row_perm : forall r V, Permutation (rank_row r V) (seq 0 V).
Proof. intros. apply bsort_perm. Qed.

Lemma rank_row_length : forall r V, length (rank_row r V) = V.
Proof. intros. rewrite (Permutation_length (rank_row_perm r V)). apply seq_length. Qed.

Lemma rank_row_NoDup : forall r V, NoDup (rank_row r V).
Proof. intros. eapply Permutation_NoDup; [symmetry; apply rank_row_perm | apply seq_NoDup]. Qed.

Lemma rank_row_In : forall r V v, In v (rank_row r V) <-> v < V.
Proof.
  intros r V v. split; intro H.
  - apply (Permutation_in _ (rank_row_perm r V)), in_seq in H. lia.
  - apply (Permutation_in _ (Permutation_sym (rank_row_perm r V))), in_seq. lia.
Qed.

Lemma tok_lt : forall tbl V d k, k < V -> tok tbl V d k < V.
Proof.
  intros. unfold tok. apply (rank_row_In (row tbl d)). apply nth_In. rewrite rank_row_length. auto.
Qed.

Lemma rank_row_sorted : forall r V, StronglySorted (fun a b => tok_before r a b = true) (rank_row r V).
Proof.
  intros. apply bsort_sorted; [apply tok_before_trans | apply tok_before_total | apply seq_NoDup].
Qed.

(* The ranked table satisfies DDTreeOrder's hypothesis [ranked]. *)
Theorem ranked_rq : forall tbl V L, table_ok tbl V L -> ranked (rq tbl V) V 1 L.
Proof.
  intros tbl V L Hok d Hd. split.
  - intros v Hv. unfold rq. apply Hok; [lia | apply tok_lt; auto].
  - intros v w [Hvw HwV]. unfold rq, qt, tok.
    destruct (Nat.eq_dec v w) as [-> | Hne]; [lra|].
    pose proof (StronglySorted_nth _ _ _ 0 v w (rank_row_sorted (row tbl d) V) ltac:(lia)
                  ltac:(rewrite rank_row_length; lia)) as H.
    apply tok_before_spec in H. destruct H as [H | [H _]]; lra.
Qed.

(* ---------- from tokens back to ranks ---------- *)

Fixpoint idx (x : nat) (l : list nat) : nat :=
  match l with
  | [] => 0
  | y :: l' => if Nat.eqb x y then 0 else S (idx x l')
  end.

Lemma idx_nth : forall x l, In x l -> nth (idx x l) l 0 = x /\ idx x l < length l.
Proof.
  intros x l. induction l as [|y l IH]; intros H; [destruct H|]. simpl.
  destruct (Nat.eqb_spec x y) as [-> | Hne]; [split; [reflexivity | lia]|].
  destruct H as [-> | H]; [contradiction|]. destruct (IH H). split; [auto | lia].
Qed.

Lemma nth_idx : forall l k, NoDup l -> k < length l -> idx (nth k l 0) l = k.
Proof.
  induction l as [|y l IH]; intros k ND Hk; [simpl in Hk; lia|]. inversion ND as [|? ? Hy ND']; subst.
  destruct k as [|k]; simpl; [rewrite Nat.eqb_refl; reflexivity|].
  destruct (Nat.eqb_spec (nth k l 0) y) as [E | E].
  - exfalso. apply Hy. rewrite <- E. apply nth_In. simpl in Hk. lia.
  - f_equal. apply IH; auto. simpl in Hk. lia.
Qed.

Fixpoint from_tokens (tbl : list (list Q)) (V k : nat) (t : list nat) : list nat :=
  match t with
  | [] => []
  | v :: t' => idx v (rank_row (row tbl k) V) :: from_tokens tbl V (S k) t'
  end.

Lemma to_from_tokens : forall tbl V t k, Forall (fun v => v < V) t ->
  to_tokens tbl V k (from_tokens tbl V k t) = t /\ Forall (fun v => v < V) (from_tokens tbl V k t).
Proof.
  intros tbl V. induction t as [|v t IH]; intros k H; [split; auto|]. inversion H; subst. simpl.
  destruct (IH (S k) ltac:(auto)) as [E F].
  assert (Hin : In v (rank_row (row tbl k) V)) by (apply rank_row_In; auto).
  destruct (idx_nth _ _ Hin) as [E1 E2]. rewrite rank_row_length in E2.
  unfold tok. rewrite E1, E. split; auto.
Qed.

Lemma from_to_tokens : forall tbl V u k, Forall (fun v => v < V) u ->
  from_tokens tbl V k (to_tokens tbl V k u) = u /\ Forall (fun v => v < V) (to_tokens tbl V k u).
Proof.
  intros tbl V. induction u as [|a u IH]; intros k H; [split; auto|]. inversion H; subst. simpl.
  destruct (IH (S k) ltac:(auto)) as [E F]. rewrite E. unfold tok. rewrite nth_idx.
  - split; auto. constructor; auto. apply tok_lt. auto.
  - apply rank_row_NoDup.
  - rewrite rank_row_length. auto.
Qed.

Lemma to_tokens_length : forall tbl V u k, length (to_tokens tbl V k u) = length u.
Proof. intros tbl V. induction u; intros; simpl; auto. Qed.

Lemma from_tokens_length : forall tbl V t k, length (from_tokens tbl V k t) = length t.
Proof. intros tbl V. induction t; intros; simpl; auto. Qed.

Lemma to_tokens_snoc : forall tbl V u a k,
  to_tokens tbl V k (u ++ [a]) = to_tokens tbl V k u ++ [tok tbl V (k + length u) a].
Proof.
  intros tbl V. induction u as [|b u IH]; intros a k; simpl.
  - rewrite Nat.add_0_r. reflexivity.
  - rewrite IH. replace (S k + length u) with (k + S (length u)) by lia. reflexivity.
Qed.

(* The score of a token tuple is the score of its rank tuple in the ranked table. *)
Lemma qprod_to_tokens : forall tbl V u k,
  qprod (qt tbl) k (to_tokens tbl V k u) = qprod (rq tbl V) k u.
Proof. intros tbl V. induction u as [|a u IH]; intros k; simpl; [reflexivity|]. rewrite IH. reflexivity. Qed.

Lemma to_tokens_prefix : forall tbl V L u, is_prefix V L u -> is_prefix V L (to_tokens tbl V 1 u).
Proof.
  intros tbl V L u [Hl Hf]. split; [rewrite to_tokens_length; auto|]. apply from_to_tokens. auto.
Qed.

Lemma from_tokens_prefix : forall tbl V L t, is_prefix V L t -> is_prefix V L (from_tokens tbl V 1 t).
Proof.
  intros tbl V L t [Hl Hf]. split; [rewrite from_tokens_length; auto|]. apply to_from_tokens. auto.
Qed.

(* ---------- the selection meets the specification, in token space ---------- *)

Theorem select_spec : forall tbl V L N ord,
  enumerates V L ord -> StronglySorted (prec (rq tbl V)) ord ->
  select tbl V L N = map (to_tokens tbl V 1) (firstn N ord).
Proof. intros. unfold select. erewrite first_n_prefixes_spec; eauto. Qed.

(* Proposition 2 (with Lemma 1) for the program, on a raw table: valid, duplicate-free,
   min(N, P) prefixes, optimal sum of q(u) over all duplicate-free sets of <= N prefixes. *)
Theorem select_proposition2 : forall tbl V L N, table_ok tbl V L ->
  let T := select tbl V L N in
  valid T /\ NoDup T /\ (forall u, In u T -> is_prefix V L u) /\
  length T = Nat.min N (length (prefixes V L)) /\
  (forall T', NoDup T' -> (forall u, In u T' -> is_prefix V L u) -> length T' <= N ->
     (qsum (qp (qt tbl)) T' <= qsum (qp (qt tbl)) T)%Q).
Proof.
  intros tbl V L N Hok T. unfold T, select. clear T.
  pose proof (ranked_rq tbl V L Hok) as Hr.
  destruct (first_n_prefixes_proposition2 (rq tbl V) V L N Hr) as (Hv & Hnd & Hlen & Hopt & _).
  destruct (sorted_prefixes_order (rq tbl V) V L) as [[_ Hin] _].
  assert (HRp : forall u, In u (first_n_prefixes (rq tbl V) V L N) -> is_prefix V L u).
  { intros u Hu. apply Hin. eapply In_firstn. exact Hu. }
  remember (first_n_prefixes (rq tbl V) V L N) as Rs eqn:HRs. clear HRs.
  assert (HTp : forall u, In u (map (to_tokens tbl V 1) Rs) -> is_prefix V L u).
  { intros t Ht. apply in_map_iff in Ht.
    destruct Ht as (u & <- & Hu). apply to_tokens_prefix. auto. }
  split; [|split; [|split; [|split]]].
  - (* valid *)
    intros t a Ht Hne. apply in_map_iff in Ht.
    destruct Ht as (w & Ew & Hw). destruct (rev w) as [|b w'] eqn:Er.
    { apply (f_equal (@rev nat)) in Er. rewrite rev_involutive in Er. subst w.
      destruct t; discriminate. }
    assert (Hw' : w = rev w' ++ [b]) by (rewrite <- (rev_involutive w), Er; reflexivity).
    rewrite Hw', to_tokens_snoc in Ew. apply app_inj_tail in Ew. destruct Ew as [Ew _].
    apply in_map_iff. exists (rev w'). split; [auto|]. rewrite Hw' in Hw. apply (Hv _ b Hw).
    intro E. rewrite E in Ew. simpl in Ew. subst. contradiction.
  - (* no duplicates: to_tokens is injective on prefixes *)
    apply NoDup_map_inj_gen; auto. intros x y Hx Hy E.
    destruct (HRp x Hx) as [_ Fx]. destruct (HRp y Hy) as [_ Fy].
    rewrite <- (proj1 (from_to_tokens tbl V x 1 Fx)), <- (proj1 (from_to_tokens tbl V y 1 Fy)), E.
    reflexivity.
  - exact HTp.
  - rewrite map_length. exact Hlen.
  - (* optimality: carry T' to rank space *)
    intros T' ND' HP' HN'.
    assert (E' : (qsum (qp (qt tbl)) T' == qsum (qp (rq tbl V)) (map (from_tokens tbl V 1) T'))%Q).
    { rewrite qsum_map. apply qsum_ext. intros t Ht. destruct (HP' t Ht) as [_ Ft].
      unfold qp. rewrite <- qprod_to_tokens, (proj1 (to_from_tokens tbl V t 1 Ft)). reflexivity. }
    assert (E : (qsum (qp (qt tbl)) (map (to_tokens tbl V 1) Rs) == qsum (qp (rq tbl V)) Rs)%Q).
    { rewrite qsum_map. apply qsum_ext. intros u _.
      unfold qp. rewrite qprod_to_tokens. reflexivity. }
    rewrite E', E. apply Hopt.
    + apply NoDup_map_inj_gen; auto. intros x y Hx Hy Exy.
      destruct (HP' x Hx) as [_ Fx]. destruct (HP' y Hy) as [_ Fy].
      rewrite <- (proj1 (to_from_tokens tbl V x 1 Fx)), <- (proj1 (to_from_tokens tbl V y 1 Fy)), Exy.
      reflexivity.
    + intros u Hu. apply in_map_iff in Hu. destruct Hu as (t & <- & Ht).
      apply from_tokens_prefix. auto.
    + rewrite map_length. auto.
Qed.

(* Lemma 1 for the program: every selected token has rank < min(N, V) at its depth. *)
Theorem select_lemma1 : forall tbl V L N, table_ok tbl V L ->
  forall t, In t (select tbl V L N) -> Forall (fun v => v < Nat.min N V) (from_tokens tbl V 1 t).
Proof.
  intros tbl V L N Hok t Ht. unfold select in Ht. apply in_map_iff in Ht.
  destruct Ht as (u & <- & Hu).
  destruct (first_n_prefixes_proposition2 (rq tbl V) V L N (ranked_rq tbl V L Hok)) as (_ & _ & _ & _ & H1).
  destruct (sorted_prefixes_order (rq tbl V) V L) as [[_ Hin] _].
  assert (Hp : is_prefix V L u) by (apply Hin; eapply In_firstn; exact Hu).
  rewrite (proj1 (from_to_tokens tbl V u 1 (proj2 Hp))). auto.
Qed.

(* ---------- Propositions 1 + 2: T_N maximises the expected acceptance length ---------- *)

(* The paper's statement (ddtree.md §2-§3), exact arithmetic, rank space: under the
   drafter's product law Q, the first N prefixes in ≺ maximise E_{Y~Q}[alpha_T(Y)] over all
   valid, duplicate-free trees T of at most N prefixes. *)
Theorem ddtree_optimal_expected_acceptance : forall q V L N ord,
  ranked q V 1 L -> normalized q V 1 L -> enumerates V L ord -> StronglySorted (prec q) ord ->
  forall T, NoDup T -> valid T -> (forall u, In u T -> is_prefix V L u) -> length T <= N ->
  (expect q V L (fun y => qnat (alpha T L y))
   <= expect q V L (fun y => qnat (alpha (firstn N ord) L y)))%Q.
Proof.
  intros q V L N ord Hr Hn He HS T ND Hv HP HN.
  destruct (ddtree_proposition2 q V L N ord Hr He HS) as (Hv' & ND' & _ & Hopt).
  rewrite (ddtree_proposition1 q V L T), (ddtree_proposition1 q V L (firstn N ord)); auto.
  intros u Hu. apply (proj2 He). eapply In_firstn. exact Hu.
Qed.

(* The same for the program on a raw table (token space). *)
Theorem select_maximises_expected_acceptance : forall tbl V L N,
  table_ok tbl V L -> normalized (qt tbl) V 1 L ->
  forall T, NoDup T -> valid T -> (forall u, In u T -> is_prefix V L u) -> length T <= N ->
  (expect (qt tbl) V L (fun y => qnat (alpha T L y))
   <= expect (qt tbl) V L (fun y => qnat (alpha (select tbl V L N) L y)))%Q.
Proof.
  intros tbl V L N Hok Hn T ND Hv HP HN.
  destruct (select_proposition2 tbl V L N Hok) as (Hv' & ND' & HP' & _ & Hopt).
  rewrite (ddtree_proposition1 (qt tbl) V L T), (ddtree_proposition1 (qt tbl) V L (select tbl V L N));
    auto.
Qed.

(* ---------- DD10: pruning keeps an initial segment of the order ---------- *)

(* DDTreeDrafter.candidates: keep the nodes with q(u) >= tau, and always the first one. *)
Definition prune (f : list nat -> Q) (tau : Q) (l : list (list nat)) : list (list nat) :=
  match l with
  | [] => []
  | x :: l' => x :: filter (fun u => Qle_bool tau (f u)) l'
  end.

Lemma filter_none : forall A (P : A -> bool) l, (forall x, In x l -> P x = false) -> filter P l = [].
Proof.
  intros A P l H. induction l as [|x l IH]; [reflexivity|]. simpl.
  rewrite H by (left; auto). apply IH. intros; apply H; right; auto.
Qed.

Lemma filter_sorted_prefix : forall (R : list nat -> list nat -> Prop) (f : list nat -> Q) tau l,
  (forall x y, R x y -> (f y <= f x)%Q) -> StronglySorted R l ->
  exists m, filter (fun u => Qle_bool tau (f u)) l = firstn m l.
Proof.
  intros R f tau l HR. induction l as [|x l IH]; intros HS; [exists 0; reflexivity|].
  apply StronglySorted_inv in HS. destruct HS as [HS HF]. rewrite Forall_forall in HF. simpl.
  destruct (Qle_bool tau (f x)) eqn:E.
  - destruct (IH HS) as [m Hm]. exists (S m). rewrite Hm. reflexivity.
  - exists 0. simpl. rewrite filter_none; [reflexivity|].
    intros y Hy. destruct (Qle_bool tau (f y)) eqn:Ey; [|reflexivity].
    apply Qle_bool_iff in Ey. assert (f y <= f x)%Q by (apply HR, HF; auto).
    assert (Qle_bool tau (f x) = true) by (apply Qle_bool_iff; lra). congruence.
Qed.

Lemma firstn_firstn_le : forall A m n (l : list A), m <= n -> firstn m (firstn n l) = firstn m l.
Proof. intros. rewrite firstn_firstn. f_equal. lia. Qed.

(* The pruned tree is the first m prefixes of the order, for some m <= N (m >= 1 when
   N >= 1 and there is a prefix); so it is a valid tree (ddtree_proposition2 with m). *)
Theorem prune_initial_segment : forall q tau N (ord : list (list nat)),
  StronglySorted (prec q) ord ->
  exists m, m <= N /\ (1 <= N -> ord <> [] -> 1 <= m) /\
            prune (qp q) tau (firstn N ord) = firstn m ord.
Proof.
  intros q tau N ord HS. destruct N as [|N]; [exists 0; split; [lia | split; [lia | reflexivity]]|].
  destruct ord as [|x ord]; [exists 0; split; [lia | split; [congruence | reflexivity]]|].
  apply StronglySorted_inv in HS. destruct HS as [HS _].
  assert (HSn : StronglySorted (prec q) (firstn N ord)).
  { rewrite <- (firstn_skipn N ord) in HS. clear -HS.
    induction (firstn N ord) as [|a l IH]; [constructor|]. simpl in HS.
    apply StronglySorted_inv in HS. destruct HS as [HS HF]. constructor; auto.
    rewrite Forall_forall in *. intros y Hy. apply HF. apply in_or_app. auto. }
  destruct (filter_sorted_prefix (prec q) (qp q) tau (firstn N ord) (prec_score q) HSn) as [m Hm].
  exists (S (Nat.min m N)). split; [lia | split; [lia|]].
  cbn [firstn prune]. rewrite Hm, firstn_firstn. reflexivity.
Qed.

Corollary prune_valid : forall q V L tau N ord,
  ranked q V 1 L -> enumerates V L ord -> StronglySorted (prec q) ord ->
  valid (prune (qp q) tau (firstn N ord)) /\ NoDup (prune (qp q) tau (firstn N ord)).
Proof.
  intros q V L tau N ord Hr He HS. destruct (prune_initial_segment q tau N ord HS) as (m & _ & _ & ->).
  destruct (ddtree_proposition2 q V L m ord Hr He HS) as (H1 & H2 & _). auto.
Qed.

(* What pruning loses: every dropped node has q(u) < tau, and at most |l| - 1 are dropped. *)
Theorem prune_loss : forall (f : list nat -> Q) tau (l : list (list nat)),
  (0 <= tau)%Q ->
  (qsum f l - qsum f (prune f tau l) <= qnat (length l - 1) * tau)%Q.
Proof.
  intros f tau l Ht. destruct l as [|x l].
  { change (0 - 0 <= qnat 0 * tau)%Q. unfold qnat. simpl. rewrite Qmult_0_l. lra. }
  cbn [prune length]. replace (S (length l) - 1) with (length l) by lia. rewrite !qsum_cons.
  rewrite qsum_filter. pose proof (qsum_const _ tau l) as Hc. unfold qnat.
  assert (H : (qsum f l - qsum (fun u => if Qle_bool tau (f u) then f u else 0) l
               <= qsum (fun _ => tau) l)%Q).
  { rewrite <- qsum_minus. apply qsum_le. intros u _. destruct (Qle_bool tau (f u)) eqn:E.
    - lra.
    - assert (f u < tau)%Q by (apply Qnot_le_lt; intro H; apply Qle_bool_iff in H; congruence). lra. }
  lra.
Qed.

(* ---------- DD5: the level-synchronous selection (method="levels") ---------- *)

(* The algorithm of specjax's _select_row_levels, in exact arithmetic: level d = the best N
   children of rank < K = min(N, V) of the prefixes of level d-1 (level 0 = the root), then
   the answer = the best N of all levels together. Not modelled: the code's further
   (j+1)(r+1) <= n_d bound on the candidates, and lax.top_k's index tie-break (here the
   order ≺ decides every tie). *)
Definition sortp (q : nat -> nat -> Q) (l : list (list nat)) : list (list nat) := bsort (precb q) l.

Definition children (V : nat) (D : list (list nat)) : list (list nat) :=
  flat_map (fun p => map (fun r => p ++ [r]) (seq 0 V)) D.

Fixpoint level (q : nat -> nat -> Q) (V N d : nat) : list (list nat) :=
  match d with
  | O => [[]]
  | S d' => firstn N (sortp q (children (Nat.min N V) (level q V N d')))
  end.

Definition levels_select (q : nat -> nat -> Q) (V L N : nat) : list (list nat) :=
  firstn N (sortp q (flat_map (level q V N) (seq 1 L))).

Lemma sortp_perm : forall q l, Permutation (sortp q l) l.
Proof. intros. apply bsort_perm. Qed.

Lemma sortp_sorted : forall q l, NoDup l -> StronglySorted (prec q) (sortp q l).
Proof.
  intros q l ND. eapply StronglySorted_impl; [|apply bsort_sorted; auto using precb_trans, precb_total].
  intros x y H. apply precb_spec. exact H.
Qed.

Lemma sortp_NoDup : forall q l, NoDup l -> NoDup (sortp q l).
Proof. intros. eapply Permutation_NoDup; [symmetry; apply sortp_perm | auto]. Qed.

Lemma sortp_In : forall q l x, In x (sortp q l) <-> In x l.
Proof. intros. split; apply Permutation_in; [|symmetry]; apply sortp_perm. Qed.

Lemma StronglySorted_filter : forall A (R : A -> A -> Prop) (P : A -> bool) l,
  StronglySorted R l -> StronglySorted R (filter P l).
Proof.
  intros A R P l HS. induction HS as [|x l HS IH HF]; simpl; [constructor|].
  destruct (P x); auto. constructor; auto. rewrite Forall_forall in *.
  intros y Hy. apply filter_In in Hy. apply HF. tauto.
Qed.

Lemma firstn_filter_all : forall A (P : A -> bool) n l,
  (forall x, In x (firstn n l) -> P x = true) -> firstn n (filter P l) = firstn n l.
Proof.
  intros A P n. induction n as [|n IH]; intros l H; [reflexivity|]. destruct l as [|x l]; [reflexivity|].
  simpl. rewrite (H x) by (left; auto). simpl. f_equal. apply IH. intros y Hy. apply H. right. auto.
Qed.

(* Sorting a sub-list S of a sorted list A that holds the first n elements of A gives the
   same first n elements. *)
Lemma firstn_sort_sub : forall q A S n,
  NoDup A -> StronglySorted (prec q) A -> NoDup S -> incl S A -> incl (firstn n A) S ->
  firstn n (sortp q S) = firstn n A.
Proof.
  intros q A S n NDA HA NDS HSA HnS.
  set (P := fun x => if in_dec path_eq_dec x S then true else false).
  assert (E : sortp q S = filter P A).
  { apply (uniqueness_of_the_order q).
    - apply sortp_NoDup; auto.
    - apply NoDup_filter; auto.
    - intros u. rewrite sortp_In, filter_In. unfold P.
      destruct (in_dec path_eq_dec u S) as [H | H].
      + split; [intros; split; auto | tauto].
      + split; [intros H'; contradiction | intros [_ H']; discriminate].
    - apply sortp_sorted; auto.
    - apply StronglySorted_filter; auto. }
  rewrite E. apply firstn_filter_all. intros x Hx. unfold P.
  destruct (in_dec path_eq_dec x S) as [_ | H]; [reflexivity|]. exfalso. apply H, HnS, Hx.
Qed.

Lemma StronglySorted_app_r : forall A (R : A -> A -> Prop) l1 l2,
  StronglySorted R (l1 ++ l2) -> StronglySorted R l2.
Proof.
  intros A R l1 l2. induction l1 as [|x l1 IH]; intros H; auto.
  apply StronglySorted_inv in H. apply IH. tauto.
Qed.

Lemma sorted_before : forall A (R : A -> A -> Prop) A1 u A2 w,
  (forall x y, R x y -> R y x -> False) -> StronglySorted R (A1 ++ u :: A2) ->
  In w (A1 ++ u :: A2) -> R w u -> In w A1.
Proof.
  intros A R A1 u A2 w Hasym HS Hw Hwu. apply in_app_or in Hw. destruct Hw as [Hw | [E | Hw]]; auto.
  - subst w. exfalso. exact (Hasym u u Hwu Hwu).
  - exfalso. apply (Hasym w u Hwu).
    assert (StronglySorted R (u :: A2)) by (eapply StronglySorted_app_r; eauto).
    apply StronglySorted_inv in H. destruct H as [_ HF]. rewrite Forall_forall in HF. auto.
Qed.

Lemma firstn_split_in : forall A (A1 A2 : list A) u n, NoDup (A1 ++ u :: A2) ->
  (In u (firstn n (A1 ++ u :: A2)) <-> length A1 < n).
Proof.
  intros A A1. induction A1 as [|a A1 IH]; intros A2 u n ND.
  - destruct n; simpl; split; intros H; try lia; try tauto.
  - destruct n as [|n]; simpl; [split; [tauto | lia]|]. inversion ND as [|? ? Ha ND']; subst.
    rewrite (IH A2 u n ND'). split; [intros [E | H]; [|lia] | intros H; right; lia].
    subst. exfalso. apply Ha. apply in_or_app. right. left. auto.
Qed.

(* ord_d: the depth-d prefixes in the order ≺. *)
Definition ord_at (q : nat -> nat -> Q) (V d : nat) : list (list nat) := sortp q (seqs V d).

Lemma ord_at_In : forall q V d u, In u (ord_at q V d) <-> length u = d /\ Forall (fun v => v < V) u.
Proof. intros. unfold ord_at. rewrite sortp_In. apply seqs_spec. Qed.

Lemma ord_at_NoDup : forall q V d, NoDup (ord_at q V d).
Proof. intros. apply sortp_NoDup, seqs_NoDup. Qed.

Lemma ord_at_sorted : forall q V d, StronglySorted (prec q) (ord_at q V d).
Proof. intros. apply sortp_sorted, seqs_NoDup. Qed.

(* A prefix among the first N of its depth has its parent among the first N of the depth
   above (Lemma 0.3: every p' ≺ p gives a child p'·v ≺ p·v). *)
Lemma parent_in_first_n : forall q V L N d p v, ranked q V 1 L -> 1 <= d -> S d <= L ->
  In (p ++ [v]) (firstn N (ord_at q V (S d))) -> In p (firstn N (ord_at q V d)).
Proof.
  intros q V L N d p v Hr Hd HdL Hu.
  assert (Hu' : In (p ++ [v]) (ord_at q V (S d))) by (eapply In_firstn; eauto).
  apply ord_at_In in Hu'. destruct Hu' as [Hl Hf]. rewrite app_length in Hl. simpl in Hl.
  apply Forall_app in Hf. destruct Hf as [Hfp Hfv].
  assert (Hp : In p (ord_at q V d)) by (apply ord_at_In; split; [lia | auto]).
  destruct (in_split _ _ Hp) as (B1 & B2 & HB).
  destruct (in_split _ _ (In_firstn _ _ _ _ Hu)) as (A1 & A2 & HA).
  pose proof (ord_at_NoDup q V d) as NDB. pose proof (ord_at_NoDup q V (S d)) as NDA.
  pose proof (ord_at_sorted q V d) as SB. pose proof (ord_at_sorted q V (S d)) as SA.
  rewrite HA in Hu, NDA, SA. rewrite HB in NDB, SB. rewrite HB.
  apply firstn_split_in in Hu; auto. apply firstn_split_in; auto.
  assert (Inc : incl (map (fun p' => p' ++ [v]) B1) A1).
  { intros w Hw. apply in_map_iff in Hw. destruct Hw as (p' & <- & Hp').
    assert (Hp'o : In p' (ord_at q V d)) by (rewrite HB; apply in_or_app; auto).
    apply ord_at_In in Hp'o. destruct Hp'o as [Hl' Hf'].
    apply (sorted_before _ (prec q) A1 (p ++ [v]) A2); [apply prec_asym | auto | |].
    - rewrite <- HA. apply ord_at_In. rewrite app_length. simpl. split; [lia|].
      apply Forall_app. auto.
    - apply (lemma0_child_order q V L); auto.
      + split; [rewrite app_length; simpl; lia | apply Forall_app; auto].
      + split; [rewrite app_length; simpl; lia | apply Forall_app; auto].
      + lia.
      + eapply (StronglySorted_app_rel _ _ B1 (p :: B2)); eauto. left. auto. }
  apply NoDup_incl_length in Inc.
  - rewrite map_length in Inc. lia.
  - apply NoDup_map_inj_gen; [|eapply NoDup_app_l; eauto].
    intros x y _ _ E. apply app_inj_tail in E. tauto.
Qed.

Lemma NoDup_firstn_l : forall A n (l : list A), NoDup l -> NoDup (firstn n l).
Proof. intros A n l H. rewrite <- (firstn_skipn n l) in H. eapply NoDup_app_l; eauto. Qed.

Lemma children_NoDup : forall V D, NoDup D -> NoDup (children V D).
Proof.
  intros V D ND. apply NoDup_flat_map_gen; auto.
  - intros p _. apply NoDup_map_inj_gen; [|apply seq_NoDup].
    intros x y _ _ E. apply app_inj_tail in E. tauto.
  - intros p p' z _ _ Hne Hz Hz'. apply in_map_iff in Hz, Hz'.
    destruct Hz as (r & <- & _). destruct Hz' as (r' & E & _). apply app_inj_tail in E. destruct E; congruence.
Qed.

Lemma children_In : forall V D u, In u (children V D) <-> exists p r, u = p ++ [r] /\ In p D /\ r < V.
Proof.
  intros V D u. unfold children. rewrite in_flat_map. split.
  - intros (p & Hp & Hu). apply in_map_iff in Hu. destruct Hu as (r & <- & Hr). apply in_seq in Hr.
    exists p, r. split; auto. split; auto. lia.
  - intros (p & r & -> & Hp & Hr). exists p. split; auto. apply in_map_iff. exists r. split; [reflexivity | apply in_seq; lia].
Qed.

Lemma snoc_cases : forall (u : list nat), u = [] \/ exists p a, u = p ++ [a].
Proof.
  intros u. destruct (rev u) as [|a p] eqn:E.
  - left. rewrite <- (rev_involutive u), E. reflexivity.
  - right. exists (rev p), a. rewrite <- (rev_involutive u), E. reflexivity.
Qed.

(* Lemma 1 at one depth: the first N prefixes of depth d only use ranks < N. *)
Lemma lemma1_at_depth : forall q V L N d u, ranked q V 1 L -> 1 <= d <= L ->
  In u (firstn N (ord_at q V d)) -> Forall (fun v => v < N) u.
Proof.
  intros q V L N d u Hr Hd Hu.
  assert (Huo : In u (ord_at q V d)) by (eapply In_firstn; eauto).
  pose proof Huo as Hp. apply ord_at_In in Hp. destruct Hp as [Hl Hf].
  apply Forall_forall. intros v Hv.
  assert (HvV : v < V) by (rewrite Forall_forall in Hf; auto).
  destruct (lt_dec v N) as [HvN | HvN]; [lia|]. exfalso.
  destruct (In_nth u v 0 Hv) as (i & Hi & Hiv).
  set (K := map (fun k => upd u i k) (seq 0 N)).
  assert (NDK : NoDup K).
  { apply NoDup_map_inj; [|apply seq_NoDup].
    intros x y _ _ E. rewrite <- (upd_nth u i x), <- (upd_nth u i y) by auto. rewrite E. reflexivity. }
  destruct (in_split _ _ Huo) as (B1 & B2 & HB).
  pose proof (ord_at_NoDup q V d) as NDB. pose proof (ord_at_sorted q V d) as SB.
  rewrite HB in Hu, NDB, SB. apply firstn_split_in in Hu; auto.
  assert (Inc : incl K B1).
  { intros w Hw. apply in_map_iff in Hw. destruct Hw as (k & <- & Hk). apply in_seq in Hk.
    apply (sorted_before _ (prec q) B1 u B2); [apply prec_asym | auto | |].
    - rewrite <- HB. apply ord_at_In. rewrite upd_length. split; auto. apply upd_bound; auto. lia.
    - apply (lemma0_lower_ranks q V L); [auto | split; [lia | auto] | apply upd_le; lia |].
      intro E. assert (nth i (upd u i k) 0 = nth i u 0) by (rewrite E; reflexivity).
      rewrite upd_nth in H by auto. lia. }
  apply NoDup_incl_length in Inc; auto. unfold K in Inc. rewrite map_length, seq_length in Inc. lia.
Qed.

(* Level d is exactly the first N prefixes of depth d in the order. *)
Theorem level_spec : forall q V L N d, ranked q V 1 L -> 1 <= d <= L ->
  level q V N d = firstn N (ord_at q V d).
Proof.
  intros q V L N d Hr. induction d as [|d IH]; intros Hd; [lia|].
  cbn [level]. apply firstn_sort_sub; [apply ord_at_NoDup | apply ord_at_sorted | | |].
  - destruct d as [|d']; [cbn [level]; apply children_NoDup; repeat constructor; auto|].
    rewrite IH by lia. apply children_NoDup, NoDup_firstn_l, ord_at_NoDup.
  - intros u Hu. apply children_In in Hu. destruct Hu as (p & r & -> & Hp & Hrv).
    assert (r < V) by lia. apply ord_at_In. rewrite app_length. simpl.
    destruct d as [|d']; [cbn [level] in Hp; destruct Hp as [<- | []]; simpl; auto|].
    rewrite IH in Hp by lia. apply In_firstn, ord_at_In in Hp. destruct Hp as [Hl Hf].
    split; [lia | apply Forall_app; auto].
  - intros u Hu. pose proof (In_firstn _ _ _ _ Hu) as Hu'. apply ord_at_In in Hu'.
    destruct Hu' as [Hl Hf]. destruct (snoc_cases u) as [-> | (p & a & ->)]; [simpl in Hl; lia|].
    rewrite app_length in Hl. simpl in Hl. apply Forall_app in Hf. destruct Hf as [Hfp Hfa].
    inversion Hfa; subst. apply children_In. exists p, a. split; [reflexivity | split].
    2: { apply Nat.min_glb_lt; auto.
         assert (HN := lemma1_at_depth q V L N (S d) (p ++ [a]) Hr ltac:(lia) Hu).
         apply Forall_app in HN. destruct HN as [_ HN]. inversion HN; auto. }
    destruct d as [|d'].
    + cbn [level]. destruct p; [left; auto | simpl in Hl; lia].
    + rewrite IH by lia. apply (parent_in_first_n q V L N (S d') p a); auto; lia.
Qed.

(* DD5 (without the candidate bound): the levels algorithm returns exactly the first N
   prefixes in the order, in that order. *)
Theorem levels_select_spec : forall q V L N, ranked q V 1 L ->
  levels_select q V L N = first_n_prefixes q V L N.
Proof.
  intros q V L N Hr. unfold levels_select, first_n_prefixes.
  destruct (sorted_prefixes_order q V L) as [[NDA HinA] SA].
  set (A := sorted_prefixes q V L) in *.
  assert (Hlev : forall d, In d (seq 1 L) -> level q V N d = firstn N (ord_at q V d)).
  { intros d Hd. apply in_seq in Hd. apply level_spec with (L := L); auto. lia. }
  apply firstn_sort_sub; auto.
  - apply NoDup_flat_map_gen; [apply seq_NoDup | |].
    + intros d Hd. rewrite Hlev by auto. apply NoDup_firstn_l, ord_at_NoDup.
    + intros d e z Hd He Hde Hz Hz'. rewrite Hlev in Hz, Hz' by auto.
      apply In_firstn, ord_at_In in Hz, Hz'. lia.
  - intros u Hu. apply in_flat_map in Hu. destruct Hu as (d & Hd & Hu). rewrite Hlev in Hu by auto.
    apply In_firstn, ord_at_In in Hu. apply in_seq in Hd. apply HinA. split; [lia | tauto].
  - intros u Hu. pose proof (In_firstn _ _ _ _ Hu) as HuA. apply HinA in HuA.
    destruct HuA as [Hl Hf]. apply in_flat_map. exists (length u). split; [apply in_seq; lia|].
    rewrite Hlev by (apply in_seq; lia).
    assert (Hud : In u (ord_at q V (length u))) by (apply ord_at_In; auto).
    destruct (in_split _ _ Hud) as (B1 & B2 & HB).
    destruct (in_split _ _ (In_firstn _ _ _ _ Hu)) as (A1 & A2 & HA).
    pose proof (ord_at_NoDup q V (length u)) as NDB. pose proof (ord_at_sorted q V (length u)) as SB.
    rewrite HA in Hu, NDA, SA. rewrite HB in NDB, SB. rewrite HB.
    apply firstn_split_in in Hu; auto. apply firstn_split_in; auto.
    assert (Inc : incl B1 A1).
    { intros w Hw. apply (sorted_before _ (prec q) A1 u A2); [apply prec_asym | auto | |].
      - assert (Hwo : In w (ord_at q V (length u))) by (rewrite HB; apply in_or_app; auto).
        apply ord_at_In in Hwo. rewrite <- HA. apply HinA. split; [lia | tauto].
      - eapply (StronglySorted_app_rel _ _ B1 (u :: B2)); eauto. left. auto. }
    apply NoDup_incl_length in Inc; [lia|]. eapply NoDup_app_l; eauto.
Qed.

(* The levels algorithm on a raw table, as token tuples: the same selection as select. *)
Definition select_levels (tbl : list (list Q)) (V L N : nat) : list (list nat) :=
  map (to_tokens tbl V 1) (levels_select (rq tbl V) V L N).

Theorem select_levels_spec : forall tbl V L N, table_ok tbl V L ->
  select_levels tbl V L N = select tbl V L N.
Proof.
  intros. unfold select_levels, select. rewrite levels_select_spec; auto. apply ranked_rq. auto.
Qed.
