(* DynaTreeLevels.v -- DynaTree's adaptive tree is a valid tree (DY2; issue 61, item 3).

   Map to the rows of proofs/README.md:
   - DY2 : build_valid  (the level-by-level construction of specjax.drafters.level_tree.build_tree,
                         whatever decides which candidates are live -- the depth / probability
                         gate, the confidence branching B(u), the threshold tau, as functions of
                         the tree built so far -- yields at most N nodes, each placed after its
                         parent (parents[i] < i), with depth = parent's depth + 1 (1 below the
                         root), depth <= L, and no two children of one node with the same rank
                         (so, top-k ranks being distinct tokens, unique siblings))

   Model (proofs/dynatree.md section 0): a node is (parent slot + 1, depth, rank): parent 0 is
   the root, parent j + 1 the node at slot j; its token is the rank-th of its parent's top-K
   (not modelled: only the rank matters here). Level 1 is u_0, rank 0 below the root (when
   N >= 1). A step takes the last level's slots, forms the candidates (j, r) for r < K in BFS
   order (slot, rank), keeps the first N - (nodes so far) of those that are live -- live is
   any function of the tree so far and the candidate -- and appends them, in that order, as
   the next level (packed slots). L levels: L - 1 steps. Not modelled: floats, the static level
   widths and the while loop's early stop (they change no node: proofs/dynatree.md Lemma 1, 3),
   the tokens (distinct ranks are distinct tokens by lax.top_k). *)

From Coq Require Import List Arith Lia.
From Coq Require FinFun.
Import ListNotations.

Definition node : Type := (nat * nat * nat)%type.
Definition npar (u : node) : nat := fst (fst u).
Definition ndep (u : node) : nat := snd (fst u).
Definition nrank (u : node) : nat := snd u.
Definition dflt : node := (0, 0, 0).

Definition dep (T : list node) (j : nat) : nat := ndep (nth j T dflt).

Definition cands (K : nat) (lvl : list nat) : list (nat * nat) :=
  flat_map (fun j => map (fun r => (j, r)) (seq 0 K)) lvl.

Definition step (live : list node -> nat * nat -> bool) (K N : nat) (st : list node * list nat)
  : list node * list nat :=
  let T := fst st in
  let kept := firstn (N - length T) (filter (live T) (cands K (snd st))) in
  (T ++ map (fun c => (S (fst c), S (dep T (fst c)), snd c)) kept, seq (length T) (length kept)).

Fixpoint grow (live : list node -> nat * nat -> bool) (K N n : nat) (st : list node * list nat)
  : list node * list nat :=
  match n with
  | O => st
  | S n' => grow live K N n' (step live K N st)
  end.

Definition start (N : nat) : list node * list nat := if Nat.leb 1 N then ([(0, 1, 0)], [0]) else ([], []).

Definition build (live : list node -> nat * nat -> bool) (K N L : nat) : list node :=
  fst (grow live K N (pred L) (start N)).

(* ---------- helpers ---------- *)

Lemma nodup_app2 : forall (A : Type) (l l' : list A), NoDup l -> NoDup l' ->
  (forall x, In x l -> ~ In x l') -> NoDup (l ++ l').
Proof.
  intros A l; induction l as [|a l IH]; intros l' H H' Hd; simpl; auto.
  inversion H; subst. constructor.
  - intro Hin. apply in_app_or in Hin as [Hin|Hin]; [contradiction|]. exact (Hd a (or_introl eq_refl) Hin).
  - apply IH; auto. intros x Hx. apply Hd. right. exact Hx.
Qed.

Lemma in_firstn2 : forall (A : Type) n (l : list A) x, In x (firstn n l) -> In x l.
Proof.
  intros A n l x H. rewrite <- (firstn_skipn n l). apply in_or_app. left. exact H.
Qed.

Lemma nodup_firstn : forall (A : Type) n (l : list A), NoDup l -> NoDup (firstn n l).
Proof.
  intros A n l; revert n; induction l as [|a l IH]; intros n H; destruct n as [|n]; simpl;
    [constructor | constructor | constructor |].
  inversion H; subst. constructor.
  - intro Hin. apply H2. exact (in_firstn2 _ _ _ _ Hin).
  - apply IH. exact H3.
Qed.

Lemma in_cands : forall K lvl j r, In (j, r) (cands K lvl) <-> In j lvl /\ r < K.
Proof.
  intros K lvl j r. unfold cands. rewrite in_flat_map. split.
  - intros (j' & Hj & Hin). apply in_map_iff in Hin as (r' & E & Hr). inversion E; subst.
    apply in_seq in Hr. split; [exact Hj | lia].
  - intros [Hj Hr]. exists j. split; [exact Hj|]. apply in_map_iff. exists r. split; [reflexivity | apply in_seq; lia].
Qed.

Lemma nodup_cands : forall K lvl, NoDup lvl -> NoDup (cands K lvl).
Proof.
  intros K lvl; induction lvl as [|j lvl IH]; intros H; [constructor|].
  inversion H; subst. unfold cands; simpl. fold (cands K lvl). apply nodup_app2; auto.
  - apply FinFun.Injective_map_NoDup; [intros a b E; inversion E; auto | apply seq_NoDup].
  - intros [j' r] Hx Hy. apply in_map_iff in Hx as (r' & E & _). inversion E; subst.
    apply in_cands in Hy as [Hy _]. contradiction.
Qed.

(* ---------- the invariant ---------- *)

(* Every node is the root's child at depth 1 or the child of an earlier node, one level below
   it; depths lie in 1..d; the last level is the last slots, all at depth d; at most N nodes;
   siblings have distinct ranks. *)
Definition inv (N d : nat) (st : list node * list nat) : Prop :=
  let T := fst st in
  length T <= N
  /\ (forall i, i < length T ->
        (npar (nth i T dflt) = 0 /\ dep T i = 1)
        \/ (exists j, npar (nth i T dflt) = S j /\ j < i /\ dep T i = S (dep T j)))
  /\ (forall i, i < length T -> 1 <= dep T i <= d)
  /\ length (snd st) <= length T /\ snd st = seq (length T - length (snd st)) (length (snd st))
  /\ (forall j, In j (snd st) -> dep T j = d)
  /\ (forall i i', i < length T -> i' < length T -> i <> i' ->
        npar (nth i T dflt) = npar (nth i' T dflt) -> nrank (nth i T dflt) <> nrank (nth i' T dflt)).

Lemma inv_start : forall N, inv N 1 (start N).
Proof.
  intros N. unfold start. destruct (Nat.leb_spec 1 N) as [HN|HN]; unfold inv; simpl.
  - split; [lia|]. split; [intros i Hi; left; destruct i; [split; reflexivity | lia]|].
    split; [intros i Hi; destruct i; [cbv; lia | lia]|]. split; [lia|]. split; [reflexivity|].
    split; [intros j [<-|[]]; reflexivity|]. intros i i' Hi Hi' Hne. lia.
  - repeat split; try lia; intros; try lia; contradiction.
Qed.

Lemma dep_app_lt : forall T U j, j < length T -> dep (T ++ U) j = dep T j.
Proof. intros. unfold dep. rewrite app_nth1 by exact H. reflexivity. Qed.

Lemma nth_map_dflt : forall (f : nat * nat -> node) kept a, a < length kept ->
  nth a (map f kept) dflt = f (nth a kept (0, 0)).
Proof.
  intros f kept a Ha. rewrite (nth_indep _ dflt (f (0, 0))) by (rewrite map_length; exact Ha).
  apply map_nth.
Qed.

Lemma nth_new : forall (T : list node) kept a,
  a < length kept ->
  nth (length T + a) (T ++ map (fun c => (S (fst c), S (dep T (fst c)), snd c)) kept) dflt
  = (S (fst (nth a kept (0, 0))), S (dep T (fst (nth a kept (0, 0)))), snd (nth a kept (0, 0))).
Proof.
  intros T kept a Ha. rewrite app_nth2 by lia. replace (length T + a - length T) with a by lia.
  rewrite nth_map_dflt by exact Ha. reflexivity.
Qed.

Lemma inv_step : forall live K N d st, inv N d st -> inv N (S d) (step live K N st).
Proof.
  intros live K N d [T lvl] (H1 & H2 & H3 & H4l & H4 & H5 & H6). simpl in *.
  set (kept := firstn (N - length T) (filter (live T) (cands K lvl))).
  set (f := fun c : nat * nat => (S (fst c), S (dep T (fst c)), snd c)).
  assert (Hlk : length kept <= N - length T) by (unfold kept; rewrite firstn_length; lia).
  assert (Hin : forall a, a < length kept -> In (nth a kept (0, 0)) (cands K lvl)).
  { intros a Ha. pose proof (nth_In kept (0, 0) Ha) as H. unfold kept in H.
    apply in_firstn2 in H. apply filter_In in H as [H _]. exact H. }
  assert (Hlvl : forall j, In j lvl -> j < length T).
  { intros j Hj. rewrite H4 in Hj. apply in_seq in Hj. lia. }
  assert (Hpar : forall a, a < length kept -> fst (nth a kept (0, 0)) < length T /\
                   dep T (fst (nth a kept (0, 0))) = d).
  { intros a Ha. destruct (nth a kept (0, 0)) as [j r] eqn:E. simpl.
    pose proof (Hin a Ha) as Hc. rewrite E in Hc. apply in_cands in Hc as [Hj _].
    split; [apply Hlvl; exact Hj | apply H5; exact Hj]. }
  assert (Hdep_new : forall a, a < length kept -> dep (T ++ map f kept) (length T + a) = S d).
  { intros a Ha. unfold dep. unfold f. rewrite nth_new by exact Ha. simpl.
    destruct (Hpar a Ha) as [_ E]. rewrite E. reflexivity. }
  assert (Hsplit : forall i, i < length (T ++ map f kept) -> i < length T \/ exists a, a < length kept /\ i = length T + a).
  { intros i Hi. rewrite app_length, map_length in Hi. destruct (Nat.lt_ge_cases i (length T)); [left; auto|].
    right. exists (i - length T). split; lia. }
  unfold inv, step; simpl. fold kept. fold f.
  rewrite app_length, map_length, seq_length.
  split; [lia|]. split; [|split; [|split; [lia|split; [|split]]]].
  - (* parents before children, depth = parent's + 1 *)
    intros i Hi. destruct (Hsplit i ltac:(rewrite app_length, map_length; exact Hi)) as [Hlt|(a & Ha & ->)].
    + destruct (H2 i Hlt) as [[Hp Hd]|(j & Hp & Hj & Hd)].
      * left. unfold npar. rewrite app_nth1 by exact Hlt. split; [exact Hp|]. rewrite dep_app_lt; auto.
      * right. exists j. unfold npar. rewrite app_nth1 by exact Hlt. split; [exact Hp|]. split; [exact Hj|].
        rewrite !dep_app_lt by lia. exact Hd.
    + right. exists (fst (nth a kept (0, 0))). destruct (Hpar a Ha) as [Hj Hd].
      rewrite (Hdep_new a Ha), (dep_app_lt T (map f kept)) by exact Hj. rewrite Hd.
      unfold npar, f. rewrite nth_new by exact Ha. simpl. split; [reflexivity|]. split; [lia | reflexivity].
  - intros i Hi. destruct (Hsplit i ltac:(rewrite app_length, map_length; exact Hi)) as [Hlt|(a & Ha & ->)].
    + rewrite dep_app_lt by exact Hlt. specialize (H3 i Hlt). lia.
    + rewrite (Hdep_new a Ha). lia.
  - f_equal. lia.
  - intros j Hj. apply in_seq in Hj. replace j with (length T + (j - length T)) by lia.
    apply Hdep_new. lia.
  - (* siblings have distinct ranks *)
    assert (Hnd : NoDup kept) by (apply nodup_firstn, NoDup_filter, nodup_cands; rewrite H4; apply seq_NoDup).
    assert (Hold : forall i a, i < length T -> a < length kept ->
              npar (nth i (T ++ map f kept) dflt) <> npar (nth (length T + a) (T ++ map f kept) dflt)).
    { intros i a Hi Ha E. unfold npar in E. unfold f in E. rewrite nth_new in E by exact Ha.
      rewrite app_nth1 in E by exact Hi. simpl in E. destruct (Hpar a Ha) as [Hj Hd].
      destruct (H2 i Hi) as [[Hp _]|(j & Hp & Hji & Hdi)]; unfold npar in Hp; rewrite Hp in E; [discriminate|].
      inversion E as [Ej]. specialize (H3 i Hi). rewrite Ej in Hdi. lia. }
    intros i i' Hi Hi' Hne Ep.
    destruct (Hsplit i ltac:(rewrite app_length, map_length; exact Hi)) as [Hlt|(a & Ha & ->)];
    destruct (Hsplit i' ltac:(rewrite app_length, map_length; exact Hi')) as [Hlt'|(a' & Ha' & ->)].
    + unfold npar, nrank in *. rewrite !app_nth1 in * by assumption. exact (H6 i i' Hlt Hlt' Hne Ep).
    + exfalso. exact (Hold i a' Hlt Ha' Ep).
    + exfalso. exact (Hold i' a Hlt' Ha (eq_sym Ep)).
    + unfold npar, nrank in *. unfold f in *. rewrite !nth_new in * by assumption. simpl in *.
      intro Er. apply Hne. f_equal. apply (proj1 (NoDup_nth kept (0, 0)) Hnd a a' Ha Ha').
      inversion Ep as [Ej]. destruct (nth a kept (0, 0)), (nth a' kept (0, 0)). simpl in *. subst. reflexivity.
Qed.

Lemma inv_grow : forall live K N n d st, inv N d st -> inv N (d + n) (grow live K N n st).
Proof.
  intros live K N n; induction n as [|n IH]; intros d st H; simpl.
  - rewrite Nat.add_0_r. exact H.
  - replace (d + S n) with (S d + n) by lia. apply IH. apply inv_step. exact H.
Qed.

(* DY2: the adaptive tree is a valid tree of <= N nodes and depth <= L, parents first, with
   unique sibling ranks, whatever rule decides which candidates live. *)
Theorem build_valid : forall live K N L, 1 <= L ->
  let T := build live K N L in
  length T <= N
  /\ (forall i, i < length T ->
        (npar (nth i T dflt) = 0 /\ dep T i = 1)
        \/ (exists j, npar (nth i T dflt) = S j /\ j < i /\ dep T i = S (dep T j)))
  /\ (forall i, i < length T -> 1 <= dep T i <= L)
  /\ (forall i i', i < length T -> i' < length T -> i <> i' ->
        npar (nth i T dflt) = npar (nth i' T dflt) -> nrank (nth i T dflt) <> nrank (nth i' T dflt)).
Proof.
  intros live K N L HL T.
  destruct (inv_grow live K N (pred L) 1 (start N) (inv_start N)) as (H1 & H2 & H3 & _ & _ & _ & H6).
  replace (1 + pred L) with L in H3 by lia.
  unfold T, build. auto.
Qed.
