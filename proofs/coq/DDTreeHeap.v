(* DDTreeHeap.v -- DDTree Proposition 3: the best-first heap (Algorithm 1, specjax's
   method="pops") pops exactly the first N prefixes of the order, in that order (issue 39
   item 2(a); row DD4 of proofs/README.md; proofs/ddtree.md §5.1).

   Map to the rows of proofs/README.md:
   - DD4 : heap_select_spec   (heap_select q V L N = first_n_prefixes q V L N for ranked
                               marginals: the t-th pop is the t-th prefix of the order ≺)
           heap_step          (one pop: under the invariant, the popped entry is the
                               t-th prefix of ≺ and the invariant holds again)
           heap_key_is_order  (on frontier entries, the code's key (-q(u), |u|, parent's
                               pop index, last rank) orders as ≺ does)
           select_heap_spec   (the same on a raw table: select_heap = select)

   Model of specjax's _select_row_pops (specjax/drafters/ddtree.py), exact rationals:
   - a frontier entry is a pair (u, i): the rank tuple u (its score q(u), depth |u| and
     last rank are read off u) and i, the pop index of u's parent as the code stores it
     (the code's -1 for depth-1 entries is 0 here: only entries of equal depth are ever
     compared on that field);
   - a pop takes the entry with the lexicographically least key
     (-q(u), |u|, i, last rank of u) -- the code's `pick` (max score, then min depth, then
     min parent index, then min rank) -- by a left-to-right scan (`pick`); no tie is left
     among distinct tuples, and no tie hypothesis is needed: heap_key_is_order shows that
     the parent-index rule agrees with rule (3) of the order on every pair of frontier
     entries, because parents are popped in the order;
   - after popping u (pop index t) the frontier gets u's first child (u·0, t) if |u| < L
     and u's next sibling (same parent index, last rank + 1) if that rank is < K =
     min(N, V), as the code's `live` flags say; the popped entry is removed (every entry
     with the tuple u: the code reuses the popped slot; the frontier holds each tuple at
     most once -- invariant (H1) of ddtree.md §5.1 -- but this file does not need that);
   - at most N pops, stopping early when the frontier is empty (the code runs exactly
     min(N, #prefixes) pops; heap_select_spec shows the two agree);
   - not modelled: float32 (scores are exact products, the code's sigma is a float32 sum
     of logarithms), the fixed array of N+1 slots, the batch. *)

From Coq Require Import List Arith Lia QArith Lqa Sorted Permutation Bool.
From Specjax Require Import GreedyWalk QSums DDTreeSurrogate DDTreeOrder DDTreeSelect.
Import ListNotations.
Local Open Scope nat_scope.

(* ---------- the algorithm ---------- *)

Fixpoint leqb (u w : list nat) : bool :=
  match u, w with
  | [], [] => true
  | a :: u', b :: w' => Nat.eqb a b && leqb u' w'
  | _, _ => false
  end.

(* A frontier entry: a rank tuple and the pop index of its parent. *)
Definition cand : Type := (list nat * nat)%type.

(* The code's key: (-sigma, depth, parent's pop index, rank). *)
Definition hkey (q : nat -> nat -> Q) (c : cand) : list Q :=
  [(- qp q (fst c))%Q; qnat (length (fst c)); qnat (snd c); qnat (last (fst c) 0)].

Definition hlt (q : nat -> nat -> Q) (c c' : cand) : bool := lexb (hkey q c) (hkey q c').

Fixpoint pick_from (q : nat -> nat -> Q) (best : cand) (l : list cand) : cand :=
  match l with
  | [] => best
  | c :: l' => pick_from q (if hlt q c best then c else best) l'
  end.

Definition pick (q : nat -> nat -> Q) (F : list cand) : option cand :=
  match F with
  | [] => None
  | c :: l => Some (pick_from q c l)
  end.

(* What popping m (at pop index t) pushes: its first child and its next sibling. *)
Definition successors (K L t : nat) (m : cand) : list cand :=
  (if length (fst m) <? L then [(fst m ++ [0], t)] else []) ++
  (if S (last (fst m) 0) <? K then [(removelast (fst m) ++ [S (last (fst m) 0)], snd m)] else []).

Fixpoint heap_loop (q : nat -> nat -> Q) (K L fuel : nat) (F : list cand) (out : list (list nat))
  : list (list nat) :=
  match fuel with
  | O => out
  | S n =>
      match pick q F with
      | None => out
      | Some m =>
          heap_loop q K L n
            (successors K L (length out) m ++ filter (fun c => negb (leqb (fst c) (fst m))) F)
            (out ++ [fst m])
      end
  end.

Definition heap_init (K L : nat) : list cand :=
  if (0 <? K) && (0 <? L) then [([0], 0)] else [].

(* Algorithm 1 with specjax's key: N pops, ranks < K = min(N, V), depth <= L. *)
Definition heap_select (q : nat -> nat -> Q) (V L N : nat) : list (list nat) :=
  heap_loop q (Nat.min N V) L N (heap_init (Nat.min N V) L) [].

(* The same on a raw marginal table, as token tuples (compare select, select_levels). *)
Definition select_heap (tbl : list (list Q)) (V L N : nat) : list (list nat) :=
  map (to_tokens tbl V 1) (heap_select (rq tbl V) V L N).

(* ---------- the scan returns a least entry ---------- *)

Lemma leqb_spec : forall u w, leqb u w = true <-> u = w.
Proof.
  induction u as [|a u IH]; intros [|b w]; simpl.
  - split; reflexivity.
  - split; discriminate.
  - split; discriminate.
  - rewrite andb_true_iff, Nat.eqb_eq, IH. split; [intros [-> ->]; reflexivity | intros E; inversion E; auto].
Qed.

Lemma hlt_spec : forall q c c', hlt q c c' = true <-> lex_lt (hkey q c) (hkey q c').
Proof. intros. apply lexb_spec. Qed.

Lemma hlt_trans : forall q c1 c2 c3, hlt q c1 c2 = true -> hlt q c2 c3 = true -> hlt q c1 c3 = true.
Proof. intros q c1 c2 c3 H1 H2. apply hlt_spec in H1, H2. apply hlt_spec. eapply lex_trans; eauto. Qed.

Lemma hlt_irrefl : forall q c, hlt q c c = false.
Proof.
  intros q c. destruct (hlt q c c) eqn:E; auto. apply hlt_spec in E. exfalso. exact (lex_irrefl _ E).
Qed.

Lemma lex_eqv_l : forall a b c, Forall2 Qeq a b -> lex_lt a c -> lex_lt b c.
Proof.
  intros a b c H. revert c. induction H as [|x y a b Hxy H IH]; intros [|z c]; simpl; try tauto.
  intros [L | [E L]]; [left; lra | right; split; [lra | auto]].
Qed.

Lemma hlt_not : forall q c c', hlt q c c' = false ->
  hlt q c' c = true \/ Forall2 Qeq (hkey q c) (hkey q c').
Proof.
  intros q c c' H. destruct (lex_trichotomy (hkey q c) (hkey q c')) as [L | [L | L]];
    [reflexivity | | |].
  - apply hlt_spec in L. congruence.
  - left. apply hlt_spec. auto.
  - right. auto.
Qed.

Lemma pick_from_spec : forall q l best,
  In (pick_from q best l) (best :: l) /\
  forall c, In c (best :: l) -> hlt q c (pick_from q best l) = false.
Proof.
  intros q l. induction l as [|c l IH]; intros best; cbn [pick_from].
  - split; [left; reflexivity|]. intros c [<- | []]. apply hlt_irrefl.
  - destruct (hlt q c best) eqn:Hcb.
    + destruct (IH c) as [Hin Hmin]. split; [destruct Hin; simpl; auto|].
      intros c0 Hc0. destruct Hc0 as [E | Hc0]; [|apply Hmin; auto]. subst c0.
      destruct (hlt q best (pick_from q c l)) eqn:E; auto. exfalso.
      assert (H : hlt q c (pick_from q c l) = true) by (eapply hlt_trans; eauto).
      rewrite Hmin in H by (left; reflexivity). discriminate.
    + destruct (IH best) as [Hin Hmin]. split; [destruct Hin; simpl; auto|].
      intros c0 Hc0. destruct Hc0 as [E | [E | Hc0]];
        [subst c0; apply Hmin; left; reflexivity | subst c0 | apply Hmin; right; auto].
      destruct (hlt q c (pick_from q best l)) eqn:E; auto. exfalso.
      assert (H : hlt q best (pick_from q best l) = true).
      { destruct (hlt_not q c best Hcb) as [H | H]; [eapply hlt_trans; eauto|].
        apply hlt_spec. apply hlt_spec in E. eapply lex_eqv_l; eauto. }
      rewrite Hmin in H by (left; reflexivity). discriminate.
Qed.

Lemma pick_spec : forall q F m, pick q F = Some m ->
  In m F /\ forall c, In c F -> hlt q c m = false.
Proof.
  intros q [|c l] m H; [discriminate|]. inversion H; subst. apply pick_from_spec.
Qed.

(* ---------- predecessors: the previous sibling, else the parent ---------- *)

Definition pred_of (w : list nat) : option (list nat) :=
  match rev w with
  | [] => None
  | S a :: rp => Some (rev rp ++ [a])
  | 0 :: [] => None
  | 0 :: rp => Some (rev rp)
  end.

Lemma pred_snoc_S : forall p a, pred_of (p ++ [S a]) = Some (p ++ [a]).
Proof. intros. unfold pred_of. rewrite rev_unit, rev_involutive. reflexivity. Qed.

Lemma pred_snoc_0 : forall p, p <> [] -> pred_of (p ++ [0]) = Some p.
Proof.
  intros p Hp. unfold pred_of. rewrite rev_unit. destruct (rev p) as [|x r] eqn:E.
  - exfalso. apply Hp. rewrite <- (rev_involutive p), E. reflexivity.
  - rewrite <- E, rev_involutive. reflexivity.
Qed.

Lemma pred_inv : forall w v, pred_of w = Some v ->
  (v <> [] /\ w = v ++ [0]) \/ (exists p a, v = p ++ [a] /\ w = p ++ [S a]).
Proof.
  intros w v H. destruct (snoc_cases w) as [-> | (p & a & ->)]; [discriminate|].
  destruct a as [|a].
  - destruct p as [|x p]; [discriminate|]. rewrite pred_snoc_0 in H by discriminate.
    inversion H; subst. left. split; [discriminate | reflexivity].
  - rewrite pred_snoc_S in H. inversion H; subst. right. exists p, a. auto.
Qed.

Lemma pred_total : forall w, w <> [] -> w = [0] \/ exists v, pred_of w = Some v.
Proof.
  intros w Hw. destruct (snoc_cases w) as [-> | (p & a & ->)]; [contradiction|].
  destruct a as [|a].
  - destruct p as [|x p]; [left; reflexivity|]. right. exists (x :: p). apply pred_snoc_0. discriminate.
  - right. exists (p ++ [a]). apply pred_snoc_S.
Qed.

(* The predecessor is a prefix that comes first in ≺ (Lemma 0.1 and 0.2). *)
Lemma pred_prec : forall q V L w v, ranked q V 1 L -> is_prefix V L w -> pred_of w = Some v ->
  is_prefix V L v /\ prec q v w.
Proof.
  intros q V L w v Hr Hw H. destruct (pred_inv w v H) as [[Hv ->] | (p & a & -> & ->)].
  - split; [eapply prefix_parent; eauto | eapply lemma0_parent; eauto].
  - destruct Hw as [Hl Hf]. rewrite app_length in Hl. simpl in Hl. apply Forall_app in Hf.
    destruct Hf as [Hfp Hfa]. inversion Hfa; subst.
    assert (Hp : is_prefix V L (p ++ [a])).
    { split; [rewrite app_length; simpl; lia | apply Forall_app; split; [auto | constructor; [lia | constructor]]]. }
    split; auto. apply (lemma0_lower_ranks q V L); auto.
    + split; [rewrite app_length; simpl; lia | apply Forall_app; auto].
    + apply Forall2_app; [apply Forall2_le_refl | constructor; auto].
    + intro E. apply app_inj_tail in E. lia.
Qed.

(* ---------- list facts ---------- *)

Lemma skipn_nth : forall A (l : list A) t d, t < length l -> skipn t l = nth t l d :: skipn (S t) l.
Proof. intros A l. induction l as [|x l IH]; intros [|t] d H; simpl in *; try lia; auto. apply IH. lia. Qed.

Lemma firstn_S_nth : forall A (l : list A) t d, t < length l -> firstn (S t) l = firstn t l ++ [nth t l d].
Proof.
  intros A l. induction l as [|x l IH]; intros [|t] d H; simpl in *; try lia; auto.
  rewrite (IH t d) by lia. reflexivity.
Qed.

Lemma nth_firstn_lt : forall A (l : list A) n i d, i < n -> nth i (firstn n l) d = nth i l d.
Proof.
  intros A l. induction l as [|x l IH]; intros [|n] [|i] d H; simpl; auto; try lia. apply IH. lia.
Qed.

Lemma StronglySorted_app_l : forall A (R : A -> A -> Prop) l1 l2,
  StronglySorted R (l1 ++ l2) -> StronglySorted R l1.
Proof.
  intros A R l1 l2. induction l1 as [|x l1 IH]; intros H; [constructor|].
  apply StronglySorted_inv in H. destruct H as [H HF]. constructor; auto.
  rewrite Forall_forall in *. intros y Hy. apply HF. apply in_or_app. auto.
Qed.

(* In a sorted list A: what lies before position t comes first in ≺, what does not lie
   before t is A[t] or comes after it. *)
Lemma before_nth : forall q A t x, StronglySorted (prec q) A -> t < length A ->
  In x (firstn t A) -> prec q x (nth t A []).
Proof.
  intros q A t x HS Ht Hx. rewrite <- (firstn_skipn t A) in HS. rewrite (skipn_nth _ A t []) in HS by auto.
  eapply StronglySorted_app_rel; eauto. left. reflexivity.
Qed.

Lemma after_nth : forall q A t x, StronglySorted (prec q) A -> t < length A -> In x A ->
  ~ In x (firstn t A) -> x = nth t A [] \/ prec q (nth t A []) x.
Proof.
  intros q A t x HS Ht Hx Hn. rewrite <- (firstn_skipn t A) in HS, Hx.
  rewrite (skipn_nth _ A t []) in HS, Hx by auto. apply in_app_or in Hx.
  destruct Hx as [Hx | [E | Hx]]; [contradiction | left; auto|]. right.
  apply StronglySorted_app_r in HS. apply StronglySorted_inv in HS. destruct HS as [_ HF].
  rewrite Forall_forall in HF. auto.
Qed.

(* ---------- the code's key orders frontier entries as ≺ does ---------- *)

(* The parent index of an entry: 0 at depth 1, else the position of its parent among the
   popped tuples out. *)
Definition pidx_ok (out : list (list nat)) (c : cand) : Prop :=
  (length (fst c) = 1 -> snd c = 0) /\
  (2 <= length (fst c) -> snd c < length out /\ nth (snd c) out [] = removelast (fst c)).

Lemma key_tail_snoc : forall q p v, 1 <= length p ->
  key_tail q (p ++ [v]) = ((- qp q p)%Q :: key_tail q p) ++ [qnat v].
Proof.
  intros q p v Hp. pose proof (key_snoc q p v Hp) as E. rewrite key_split in E.
  inversion E as [[H0 H1]]. rewrite H1. reflexivity.
Qed.

Lemma key_tail_length : forall q p, length (key_tail q p) = (length p - 1) + length p.
Proof. intros. unfold key_tail. rewrite app_length, !map_length, rev_length, seq_length. reflexivity. Qed.

Lemma lex_app_inv : forall x y x' y', length x = length y -> lex_lt (x ++ x') (y ++ y') ->
  lex_lt x y \/ (Forall2 Qeq x y /\ lex_lt x' y').
Proof.
  induction x as [|a x IH]; intros [|b y] x' y' Hl H; simpl in Hl; try discriminate.
  - right. split; [constructor | exact H].
  - simpl in H. destruct H as [H | [E H]]; [left; left; auto|].
    destruct (IH y x' y' ltac:(lia) H) as [H' | [H' H'']].
    + left. right. auto.
    + right. split; [constructor; auto | auto].
Qed.

Theorem heap_key_is_order : forall q (out : list (list nat)) c c',
  NoDup out -> StronglySorted (prec q) out -> pidx_ok out c -> pidx_ok out c' ->
  fst c <> [] -> fst c' <> [] -> prec q (fst c) (fst c') -> hlt q c c' = true.
Proof.
  intros q out [u i] [w j] ND HS [P1 P2] [P1' P2'] Hu Hw H. cbn [fst snd] in *.
  apply hlt_spec. unfold hkey. cbn [fst snd]. unfold prec in H. rewrite !key_split in H.
  cbn [lex_lt] in H |- *.
  destruct H as [H | [E1 [H | [E2 H]]]]; [left; auto | right; split; [auto | left; auto]|].
  right. split; [auto|]. right. split; [auto|].
  apply qnat_inj in E2.
  destruct (Nat.eq_dec (length u) 1) as [U1 | U1].
  - (* depth 1: the parent field is 0 on both sides, the rank decides *)
    rewrite (P1 U1), (P1' ltac:(lia)). right. split; [reflexivity|].
    destruct u as [|a [|a' u]]; [contradiction | | simpl in U1; lia].
    destruct w as [|b [|b' w]]; [contradiction | | simpl in E2; lia].
    cbn in H. cbn [last]. left. destruct H as [H | [_ []]]. exact H.
  - destruct (snoc_cases u) as [-> | (p & a & ->)]; [contradiction|].
    destruct (snoc_cases w) as [-> | (p' & b & ->)]; [contradiction|].
    rewrite !app_length in E2. simpl in E2. rewrite app_length in U1. simpl in U1.
    assert (Hp : 1 <= length p) by lia.
    rewrite !key_tail_snoc in H by lia.
    apply lex_app_inv in H; [|simpl; rewrite !key_tail_length; lia].
    destruct (P2 ltac:(rewrite app_length; simpl; lia)) as [Hi Ei].
    destruct (P2' ltac:(rewrite app_length; simpl; lia)) as [Hj Ej].
    rewrite removelast_last in Ei, Ej.
    destruct H as [H | [H1 H2]].
    + (* different parents: ≺ on the parents, which is the order of their pop indices *)
      assert (Hpp : prec q p p').
      { unfold prec. rewrite !key_split. cbn [lex_lt] in H |- *.
        destruct H as [H | [E H]]; [left; auto|]. right. split; [auto|]. right.
        split; [replace (length p') with (length p) by lia; reflexivity | auto]. }
      left. apply qnat_lt.
      destruct (lt_eq_lt_dec i j) as [[L | L] | L]; auto; exfalso.
      * subst j. rewrite Ei in Ej. subst p'. exact (prec_irrefl q p Hpp).
      * apply (prec_asym q p p'); auto. rewrite <- Ei, <- Ej. apply StronglySorted_nth; auto.
    + (* the same parent: the same pop index, the last rank decides *)
      assert (H3 : Forall2 Qeq (key_tail q p) (key_tail q p')) by (inversion H1; auto).
      assert (Ep : p = p').
      { unfold key_tail in H3. apply Forall2_qeq_qnat.
        eapply Forall2_app_inv_Qeq; [|exact H3]. rewrite !map_length, !rev_length, !seq_length. lia. }
      subst p'. assert (i = j).
      { apply (proj1 (NoDup_nth out [])); auto. congruence. }
      subst j. right. split; [reflexivity|]. rewrite !last_last. left.
      cbn in H2. destruct H2 as [H2 | [_ []]]. exact H2.
Qed.

(* ---------- the invariant ---------- *)

(* Tuples of S_K: prefixes of depth 1..L with every rank < K. *)
Definition Kp (V L K : nat) (w : list nat) : Prop := is_prefix V L w /\ Forall (fun v => v < K) w.

(* After t pops that were the first t prefixes of A: every entry is a tuple of S_K with a
   correct parent index, and the frontier holds exactly the tuples of S_K not yet popped
   whose predecessor has been popped (plus [0] until it is popped): (H1) of ddtree.md. *)
Definition heap_inv (V L N : nat) (A : list (list nat)) (t : nat) (F : list cand) : Prop :=
  t <= N /\
  (forall c, In c F -> Kp V L (Nat.min N V) (fst c) /\ pidx_ok (firstn t A) c) /\
  (forall w, Kp V L (Nat.min N V) w ->
     (In w (map fst F) <-> ~ In w (firstn t A) /\
                            (w = [0] \/ exists v, pred_of w = Some v /\ In v (firstn t A)))).

Lemma pidx_ok_app : forall out x c, pidx_ok out c -> pidx_ok (out ++ [x]) c.
Proof.
  intros out x c [P1 P2]. split; auto. intros H. destruct (P2 H) as [H1 H2].
  rewrite app_length, app_nth1 by auto. simpl. split; [lia | auto].
Qed.

Lemma Kp_nonempty : forall V L K w, Kp V L K w -> w <> [].
Proof. intros V L K w [[Hl _] _] E. subst. simpl in Hl. lia. Qed.

(* One pop. *)
Theorem heap_step : forall q V L N t F,
  ranked q V 1 L -> heap_inv V L N (sorted_prefixes q V L) t F ->
  t < N -> t < length (sorted_prefixes q V L) ->
  exists m, pick q F = Some m /\ fst m = nth t (sorted_prefixes q V L) [] /\
    heap_inv V L N (sorted_prefixes q V L) (S t)
      (successors (Nat.min N V) L t m ++ filter (fun c => negb (leqb (fst c) (fst m))) F).
Proof.
  intros q V L N t F Hr [Ht [J12 J3]] HtN HtA.
  destruct (sorted_prefixes_order q V L) as [[NDA HinA] SA].
  set (A := sorted_prefixes q V L) in *. set (K := Nat.min N V) in *.
  set (out := firstn t A) in *. set (u := nth t A []).
  assert (HuA : In u A) by (apply nth_In; auto).
  assert (Hup : is_prefix V L u) by (apply HinA; auto).
  assert (HuK : Kp V L K u).
  { split; auto. apply (ddtree_lemma1 q V L N A Hr (conj NDA HinA) SA).
    unfold u. rewrite <- (nth_firstn_lt _ A N t [] HtN). apply nth_In.
    rewrite firstn_length. lia. }
  assert (Hu0 : u <> []) by (eapply Kp_nonempty; eauto).
  assert (Huo : ~ In u out).
  { intro H. exact (prec_irrefl q u (before_nth q A t u SA HtA H)). }
  assert (NDo : NoDup out) by (apply NoDup_firstn_l; auto).
  assert (So : StronglySorted (prec q) out).
  { unfold out. rewrite <- (firstn_skipn t A) in SA. eapply StronglySorted_app_l; eauto. }
  (* the t-th prefix is in the frontier: its predecessor comes first, so it was popped *)
  assert (HuF : In u (map fst F)).
  { apply J3; auto. split; auto. destruct (pred_total u Hu0) as [E | (v & Hv)]; [left; auto|].
    right. exists v. split; auto. destruct (pred_prec q V L u v Hr Hup Hv) as [Hvp Hvu].
    destruct (In_dec path_eq_dec v out) as [Hvo | Hvo]; auto. exfalso.
    destruct (after_nth q A t v SA HtA (proj2 (HinA v) Hvp) Hvo) as [E | E].
    - fold u in E. subst v. exact (prec_irrefl q u Hvu).
    - exact (prec_asym q u v E Hvu). }
  apply in_map_iff in HuF. destruct HuF as (cu & Ecu & Hcu).
  destruct (pick q F) as [m|] eqn:Hpick; [|destruct F; [contradiction | discriminate]].
  destruct (pick_spec q F m Hpick) as [HmF Hmin].
  destruct (J12 m HmF) as [HmK Hmp].
  assert (Emu : fst m = u).
  { assert (Hmo : ~ In (fst m) out).
    { apply (J3 (fst m) HmK). apply in_map. auto. }
    destruct (after_nth q A t (fst m) SA HtA (proj2 (HinA _) (proj1 HmK)) Hmo) as [E | E]; auto.
    exfalso. fold u in E. rewrite <- Ecu in E.
    destruct (J12 cu Hcu) as [HcK Hcp].
    assert (hlt q cu m = true).
    { apply (heap_key_is_order q out); auto; eapply Kp_nonempty; eauto. }
    rewrite Hmin in H by auto. discriminate. }
  exists m. split; [reflexivity | split; [auto|]].
  (* the invariant after the pop *)
  assert (Eout : firstn (S t) A = out ++ [u]) by (apply firstn_S_nth; auto).
  assert (HKpos : 0 < K).
  { destruct u as [|a u']; [contradiction|]. destruct HuK as [_ Hf]. inversion Hf; lia. }
  destruct (snoc_cases u) as [E0 | (p & a & Epa)]; [contradiction|].
  assert (Hsucc : forall c, In c (successors K L t m) ->
            Kp V L K (fst c) /\ pidx_ok (out ++ [u]) c /\ pred_of (fst c) = Some u).
  { intros c Hc. unfold successors in Hc. rewrite Emu, Epa in Hc. rewrite Epa in HuK, Hup.
    rewrite removelast_last, last_last in Hc. destruct HuK as [[Hl Hf] HfK].
    rewrite app_length in Hl. simpl in Hl.
    apply Forall_app in Hf, HfK. destruct Hf as [Hfp Hfa]. destruct HfK as [HfKp HfKa].
    apply in_app_or in Hc. destruct Hc as [Hc | Hc].
    - destruct (Nat.ltb_spec (length (p ++ [a])) L) as [HL | HL]; [|destruct Hc].
      destruct Hc as [<- | []]. cbn [fst snd]. rewrite app_length in HL. simpl in HL.
      split; [|split].
      + split; [split|].
        * rewrite !app_length. simpl. lia.
        * apply Forall_app. split; [apply Forall_app; auto | constructor; auto; lia].
        * apply Forall_app. split; [apply Forall_app; auto | constructor; auto].
      + unfold pidx_ok. cbn [fst snd]. rewrite removelast_last.
        assert (Lo : length out = t) by (unfold out; rewrite firstn_length; lia).
        rewrite !app_length, Lo. simpl. split; [lia|]. intros _.
        rewrite app_nth2 by lia. rewrite Lo, Nat.sub_diag. simpl. split; [lia | auto].
      + rewrite Epa. apply pred_snoc_0. intro E. apply app_eq_nil in E. destruct E; discriminate.
    - destruct (Nat.ltb_spec (S a) K) as [HK | HK]; [|destruct Hc].
      destruct Hc as [<- | []]. cbn [fst snd]. split; [|split].
      + split; [split|].
        * rewrite app_length. simpl. lia.
        * apply Forall_app. split; auto. constructor; auto. unfold K in HK. lia.
        * apply Forall_app. split; auto.
      + destruct Hmp as [P1 P2]. rewrite Emu, Epa in P1, P2. unfold pidx_ok. cbn [fst snd]. split.
        * intros H1. apply P1. rewrite app_length in H1 |- *. simpl in *. lia.
        * intros H2. rewrite app_length in H2. simpl in H2.
          destruct (P2 ltac:(rewrite app_length; simpl; lia)) as [H3 H4].
          rewrite removelast_last in H4 |- *. rewrite app_length, app_nth1 by auto.
          simpl. split; [lia | auto].
      + rewrite Epa. apply pred_snoc_S. }
  split; [lia|]. rewrite Eout. split.
  - intros c Hc. apply in_app_or in Hc. destruct Hc as [Hc | Hc]; [apply Hsucc in Hc; tauto|].
    apply filter_In in Hc. destruct Hc as [Hc _]. destruct (J12 c Hc) as [H1 H2].
    split; auto. apply pidx_ok_app. auto.
  - intros w Hw. rewrite map_app. split.
    + intros Hin. apply in_app_or in Hin. destruct Hin as [Hin | Hin].
      * apply in_map_iff in Hin. destruct Hin as (c & <- & Hc). destruct (Hsucc c Hc) as (HcK & _ & Hpr).
        destruct (pred_prec q V L (fst c) u Hr (proj1 HcK) Hpr) as [_ Hlt].
        split; [|right; exists u; split; [auto | apply in_or_app; right; left; reflexivity]].
        intro Hin. apply in_app_or in Hin. destruct Hin as [Hin | [E | []]].
        -- exact (prec_asym q _ _ Hlt (before_nth q A t (fst c) SA HtA Hin)).
        -- rewrite E in Hlt. exact (prec_irrefl q _ Hlt).
      * apply in_map_iff in Hin. destruct Hin as (c & <- & Hc). apply filter_In in Hc.
        destruct Hc as [Hc Hne]. destruct (J3 (fst c) Hw) as [H1 _].
        destruct (H1 (in_map fst F c Hc)) as [Hno Hpo].
        assert (Hcu2 : fst c <> u).
        { intro E. rewrite <- Emu in E. apply leqb_spec in E. rewrite E in Hne. discriminate. }
        split.
        -- intro Hin. apply in_app_or in Hin. destruct Hin as [Hin | [E | []]]; auto.
        -- destruct Hpo as [E | (v & Hv & Hvo)]; [left; auto | right; exists v; split; auto].
           apply in_or_app. auto.
    + intros [Hno Hpo].
      assert (Hwo : ~ In w out) by (intro H; apply Hno; apply in_or_app; auto).
      assert (Hwu : w <> u) by (intro E; apply Hno; apply in_or_app; right; left; auto).
      assert (Old : (w = [0] \/ exists v, pred_of w = Some v /\ In v out) ->
                    In w (map fst (filter (fun c => negb (leqb (fst c) (fst m))) F))).
      { intros H0. assert (H : In w (map fst F)) by (apply (J3 w Hw); auto). apply in_map_iff in H. destruct H as (c & Ec & Hc).
        apply in_map_iff. exists c. split; auto. apply filter_In. split; auto.
        rewrite Emu, Ec. destruct (leqb w u) eqn:E; auto. apply leqb_spec in E. contradiction. }
      apply in_or_app. destruct Hpo as [E | (v & Hv & Hvo)]; [right; apply Old; left; auto|].
      apply in_app_or in Hvo. destruct Hvo as [Hvo | [Evu | []]].
      * right. apply Old. right. exists v. auto.
      * subst v. left. apply in_map_iff. unfold successors. rewrite Emu.
        destruct Hw as [[Hl Hf] HfK].
        destruct (pred_inv w u Hv) as [[_ Ew] | (p' & a' & Eu & Ew)].
        -- exists (u ++ [0], t). split; [auto|]. apply in_or_app. left.
           subst w. rewrite app_length in Hl. simpl in Hl.
           destruct (Nat.ltb_spec (length u) L); [left; reflexivity | lia].
        -- exists (p' ++ [S a'], snd m). split; [auto|]. apply in_or_app. right.
           rewrite Eu, removelast_last, last_last. subst w. apply Forall_app in HfK.
           destruct HfK as [_ HfK]. inversion HfK; subst.
           destruct (Nat.ltb_spec (S a') K); [left; reflexivity | lia].
Qed.

Lemma heap_init_inv : forall q V L N, heap_inv V L N (sorted_prefixes q V L) 0 (heap_init (Nat.min N V) L).
Proof.
  intros q V L N. split; [lia|]. cbn [firstn]. split.
  - intros c Hc. unfold heap_init in Hc.
    destruct (Nat.ltb_spec 0 (Nat.min N V)); destruct (Nat.ltb_spec 0 L); cbn in Hc; try contradiction.
    destruct Hc as [<- | []]. cbn [fst snd]. split.
    + split; [split; [simpl; lia | constructor; auto; lia] | constructor; auto].
    + split; [auto | simpl; lia].
  - intros w Hw. assert (Hw0 := Kp_nonempty _ _ _ _ Hw).
    destruct Hw as [[Hl Hf] HfK].
    assert (HK : 0 < Nat.min N V) by (destruct w as [|a w]; [contradiction | inversion HfK; lia]).
    unfold heap_init. destruct (Nat.ltb_spec 0 (Nat.min N V)); [|lia].
    destruct (Nat.ltb_spec 0 L); [|lia]. cbn. split.
    + intros [<- | []]. split; auto.
    + intros [_ [E | (v & _ & [])]]. left. auto.
Qed.

Lemma heap_loop_spec : forall q V L N, ranked q V 1 L ->
  forall fuel t F, t + fuel = N -> heap_inv V L N (sorted_prefixes q V L) t F ->
  heap_loop q (Nat.min N V) L fuel F (firstn t (sorted_prefixes q V L)) =
  firstn N (sorted_prefixes q V L).
Proof.
  intros q V L N Hr fuel. induction fuel as [|n IH]; intros t F Ht Hinv.
  - rewrite Nat.add_0_r in Ht. subst. reflexivity.
  - destruct (sorted_prefixes_order q V L) as [[NDA HinA] SA].
    set (A := sorted_prefixes q V L) in *.
    destruct (lt_dec t (length A)) as [HtA | HtA].
    + assert (HtN : t < N) by lia.
      destruct (heap_step q V L N t F Hr Hinv HtN HtA) as (m & Hpick & Em & Hinv').
      cbn [heap_loop]. rewrite Hpick, firstn_length, (Nat.min_l t) by lia.
      replace (firstn t A ++ [fst m]) with (firstn (S t) A)
        by (rewrite Em; apply firstn_S_nth; auto).
      apply IH; [lia | exact Hinv'].
    + (* everything is popped: the frontier is empty *)
      assert (HF : F = []).
      { destruct F as [|c F]; auto. exfalso. destruct Hinv as [_ [J12 J3]].
        destruct (J12 c (or_introl eq_refl)) as [HcK _].
        assert (Hc : In (fst c) (map fst (c :: F))) by (left; reflexivity).
        apply (J3 _ HcK) in Hc. destruct Hc as [Hc _]. apply Hc.
        rewrite firstn_all2 by lia. apply HinA. apply HcK. }
      subst F. cbn [heap_loop pick]. rewrite !firstn_all2 by lia. reflexivity.
Qed.

(* ---------- Proposition 3 ---------- *)

(* DD4: the heap pops exactly the first N prefixes of ≺, in order. *)
Theorem heap_select_spec : forall q V L N, ranked q V 1 L ->
  heap_select q V L N = first_n_prefixes q V L N.
Proof.
  intros q V L N Hr. unfold heap_select, first_n_prefixes.
  change (@nil (list nat)) with (firstn 0 (sorted_prefixes q V L)).
  apply heap_loop_spec; auto. apply heap_init_inv.
Qed.

(* The same on a raw table: the heap selects what select selects. *)
Theorem select_heap_spec : forall tbl V L N, table_ok tbl V L ->
  select_heap tbl V L N = select tbl V L N.
Proof.
  intros. unfold select_heap, select. rewrite heap_select_spec; auto. apply ranked_rq. auto.
Qed.
