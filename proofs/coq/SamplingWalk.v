(* SamplingWalk.v -- the tree sampling walk is exactly lossless for any tree (row V3 of
   proofs/README.md; proofs/sampling_walk.md), and its expected number of accepted draft
   tokens is sum_{u in T} p(u) (row DD8; proofs/ddtree.md section 7.2).

   Map to the rows of proofs/README.md:
   - V3  : sampling_walk_law      (one round, tree T fixed: the probability, over the
                                   verifier's independent per-slot samples, that the round
                                   emits exactly s (accepted path ++ [bonus]) is
                                   prod_i p(ctx, s_<i)(s_i) if s is a possible emission of
                                   T and 0 otherwise; possible_spec spells "possible" out:
                                   1 <= |s| <= D + 1, every proper non-empty prefix of s is
                                   a node of T, and s itself is not (unless |s| = D + 1))
           sampling_walk_expectation (E[g(emission)] = sum over the possible emissions e of
                                   prod_i p(ctx, e_<i)(e_i) * g(e), for every g)
           sampling_walk_total    (the possible emissions' sequential probabilities sum to 1)
           sampling_walk_stream   (the whole loop, rounds composed: for every finite y, the
                                   probability that the emitted stream starts with y is
                                   prod_i p(ctx, y_<i)(y_i), whatever trees the drafter
                                   proposes, as a finite mixture that may depend on the
                                   committed text)
   - DD8 : walk_expected_accepted (E[#accepted draft tokens] =
                                   sum_{u in T, |u| <= D} p(u) for a valid duplicate-free T)
           walk_expected_accepted_full (= sum_{u in T} p(u) when D >= the depth of T)

   Model / differences from the written statement (see proofs/README.md,
   "Machine-checked (Coq)"):
   - exact rationals (Q) instead of float32; the vocabulary is any duplicate-free list vs of
     nat; p : list nat -> nat -> Q gives the (processed) target law after a context, each
     p c non-negative on vs and summing to 1 over vs (ChainRejection.distribution);
     non-negativity is not even used;
   - a tree is a list of root paths (GreedyWalk.tree), not specjax's parent array; its
     slots are the root [] and the distinct listed paths ([nodes]); the verifier's samples
     are modelled explicitly: an assignment gives one token Y_u to every slot, its
     probability is prod_u p(ctx ++ u)(Y_u) (independent samples, (I) of sampling_walk.md,
     and exact tree attention (E) by construction), and a probability / expectation is the
     finite sum over all assignments in vs^slots ([assignments]); the walk is then a
     deterministic function of the assignment, which is what the code computes;
   - a duplicate path is one slot here; in specjax duplicate sibling slots each get a
     sample and the walk enters the lowest-index copy, whose subtree is a tree fixed
     before sampling, so V3 applies to it; prefix-closure is not needed for V3 (the walk
     only looks at children of nodes it has reached), it is needed for DD8;
   - the depth limit is D (max_depth); tokens outside vs never occur (hypotheses
     Forall (In vs));
   - the stream law is a finite recursion over rounds ([walk_stream]), each round a finite
     sum over its own fresh assignments and over the drafter's finite law of trees; no
     general probability space (none in the standard library). *)

From Coq Require Import List Arith Lia QArith Lqa Permutation.
From Specjax Require Import QSums GreedyWalk ChainRejection.
Import ListNotations.
Local Open Scope Q_scope.

(* ---------- finite products of rationals ---------- *)

Definition qprodl {A : Type} (f : A -> Q) (l : list A) : Q :=
  fold_right (fun x acc => f x * acc) 1 l.

Lemma qprodl_cons : forall A (f : A -> Q) x l, qprodl f (x :: l) == f x * qprodl f l.
Proof. reflexivity. Qed.

Lemma qprodl_ext : forall A (f g : A -> Q) l,
  (forall x, In x l -> f x == g x) -> qprodl f l == qprodl g l.
Proof.
  induction l; intros H; simpl; [reflexivity|]. unfold qprodl in *. simpl.
  rewrite H by (left; auto). rewrite IHl by (intros; apply H; right; auto). reflexivity.
Qed.

Lemma qprodl_perm : forall A (f : A -> Q) l1 l2, Permutation l1 l2 -> qprodl f l1 == qprodl f l2.
Proof.
  intros A f l1 l2 P. induction P; unfold qprodl in *; simpl.
  - reflexivity.
  - rewrite IHP. reflexivity.
  - ring.
  - rewrite IHP1, IHP2. reflexivity.
Qed.

Lemma qprodl_filter : forall A (f : A -> Q) (P : A -> bool) l,
  qprodl f (filter P l) == qprodl (fun x => if P x then f x else 1) l.
Proof.
  induction l; simpl; [reflexivity|]. unfold qprodl in *; simpl.
  destruct (P a); simpl; rewrite IHl; ring.
Qed.

Lemma qprodl_map : forall A B (f : B -> Q) (h : A -> B) l,
  qprodl f (map h l) == qprodl (fun x => f (h x)) l.
Proof.
  induction l; simpl; [reflexivity|]. unfold qprodl in *; simpl. rewrite IHl. reflexivity.
Qed.

(* Picking one element out of a duplicate-free list, for any type with decidable equality. *)
Lemma qsum_pick_dec : forall A (dec : forall x y : A, {x = y} + {x <> y}) (f : A -> Q) a l,
  NoDup l -> In a l -> qsum (fun v => if dec a v then f v else 0) l == f a.
Proof.
  intros A dec f a l. revert a. induction l as [|b l IH]; intros a ND H; [destruct H|].
  inversion ND as [|? ? Hb ND']; subst. rewrite qsum_cons. destruct H as [<- | H].
  - destruct (dec b b) as [_|n]; [|contradiction]. rewrite (qsum_zero _ _ l); [ring|].
    intros x Hx. destruct (dec b x); [subst; contradiction | reflexivity].
  - destruct (dec a b); [subst; contradiction|]. rewrite IH by auto. apply Qplus_0_l.
Qed.

Lemma NoDup_app_disj : forall A (l1 l2 : list A), NoDup l1 -> NoDup l2 ->
  (forall x, In x l1 -> ~ In x l2) -> NoDup (l1 ++ l2).
Proof.
  induction l1 as [|a l1 IH]; intros l2 N1 N2 D; simpl; auto.
  inversion N1; subst. constructor.
  - rewrite in_app_iff. intros [H | H]; [contradiction | apply (D a); simpl; auto].
  - apply IH; auto. intros x Hx. apply D. right. auto.
Qed.

(* ---------- the model ---------- *)

(* The slots of a tree: the root [] and the listed paths, each distinct path once. *)
Definition nodes (T : tree) : list path := nodup path_eq_dec ([] :: T).

Lemma in_nodes : forall T u, In u (nodes T) <-> u = [] \/ In u T.
Proof. intros. unfold nodes. rewrite nodup_In. simpl. intuition. Qed.

Lemma nodes_nodup : forall T, NoDup (nodes T).
Proof. intros. apply NoDup_nodup. Qed.

(* An assignment gives one token to each slot: the verifier's samples Y_u. *)
Definition assignment := list (path * nat).

(* All assignments of tokens of vs to the slots ns. *)
Fixpoint assignments (vs : list nat) (ns : list path) : list assignment :=
  match ns with
  | [] => [[]]
  | u :: ns' => flat_map (fun x => map (cons (u, x)) (assignments vs ns')) vs
  end.

(* Its probability: the samples are independent, Y_u ~ p (ctx ++ u). *)
Fixpoint weight (p : list nat -> nat -> Q) (ctx : list nat) (a : assignment) : Q :=
  match a with
  | [] => 1
  | (u, x) :: a' => p (ctx ++ u) x * weight p ctx a'
  end.

(* The sample at slot u. *)
Fixpoint look (a : assignment) (u : path) : nat :=
  match a with
  | [] => 0%nat
  | (v, x) :: a' => if path_eq_dec v u then x else look a' u
  end.

Lemma look_cons_eq : forall u x a, look ((u, x) :: a) u = x.
Proof. intros. simpl. destruct (path_eq_dec u u); congruence. Qed.

Lemma look_cons_neq : forall u v x a, u <> v -> look ((u, x) :: a) v = look a v.
Proof. intros. simpl. destruct (path_eq_dec u v); congruence. Qed.

Lemma look_in : forall vs ns a v, In a (assignments vs ns) -> In v ns -> In (look a v) vs.
Proof.
  intros vs ns. induction ns as [|u ns IH]; intros a v Ha Hv; [destruct Hv|].
  simpl in Ha. apply in_flat_map in Ha as (x & Hx & Ha). apply in_map_iff in Ha as (a' & <- & Ha').
  simpl. destruct (path_eq_dec u v) as [<- | n]; auto.
  destruct Hv as [<- | Hv]; [contradiction|]. auto.
Qed.

(* The walk: at node u, read the sample Y_u; if u ++ [Y_u] is a node of the tree (and the
   depth limit is not reached) move there, else emit Y_u as the bonus and stop. The result
   is the round's emission: accepted path ++ [bonus]. *)
Fixpoint walk (T : tree) (a : assignment) (fuel : nat) (u : path) : list nat :=
  match fuel with
  | O => [look a u]
  | S f =>
      if in_dec path_eq_dec (u ++ [look a u]) T then look a u :: walk T a f (u ++ [look a u])
      else [look a u]
  end.

(* ---------- independence: the probability of a cylinder event ---------- *)

(* A constraint fixes the sample at some slots: c u = Some y means "Y_u = y". *)
Definition agreeb (c : path -> option nat) (ns : list path) (a : assignment) : bool :=
  forallb (fun u => match c u with Some y => Nat.eqb (look a u) y | None => true end) ns.

Lemma agreeb_cons_other : forall c ns u x a, ~ In u ns ->
  agreeb c ns ((u, x) :: a) = agreeb c ns a.
Proof.
  intros c ns u x a. induction ns as [|v ns IH]; intros H; [reflexivity|].
  unfold agreeb in *. cbn [forallb].
  rewrite look_cons_neq by (intro E; apply H; left; auto).
  rewrite IH by (intro; apply H; right; auto). reflexivity.
Qed.

Lemma cylinder : forall vs p ctx (c : path -> option nat) ns,
  NoDup vs -> NoDup ns -> (forall u, qsum (p (ctx ++ u)) vs == 1) ->
  (forall u y, In u ns -> c u = Some y -> In y vs) ->
  qsum (fun a => weight p ctx a * (if agreeb c ns a then 1 else 0)) (assignments vs ns)
  == qprodl (fun u => match c u with Some y => p (ctx ++ u) y | None => 1 end) ns.
Proof.
  intros vs p ctx c ns Nv. induction ns as [|u ns IH]; intros Nn S Hc.
  - reflexivity.
  - inversion Nn as [|? ? Hu Nn']; subst. cbn [assignments]. rewrite qsum_flat_map.
    set (m := fun x => match c u with Some y => if Nat.eqb x y then 1 else 0 | None => 1 end).
    rewrite (qsum_ext _ _ (fun x => (p (ctx ++ u) x * m x) *
        qsum (fun a => weight p ctx a * (if agreeb c ns a then 1 else 0)) (assignments vs ns))).
    2: { intros x _. rewrite qsum_map. rewrite <- qsum_scal_l. apply qsum_ext. intros a _.
         cbn [weight]. unfold agreeb at 1. cbn [forallb]. rewrite look_cons_eq.
         fold (agreeb c ns ((u, x) :: a)). rewrite agreeb_cons_other by auto.
         unfold m. destruct (c u) as [y|]; [destruct (Nat.eqb x y)|];
           destruct (agreeb c ns a); simpl; ring. }
    rewrite qsum_scal_r, IH by (auto; intros; apply (Hc u0); auto; right; auto).
    rewrite qprodl_cons. apply Qmult_comp; [|reflexivity].
    unfold m. destruct (c u) as [y|] eqn:E.
    + rewrite (qsum_ext _ _ (fun x => if Nat.eqb x y then p (ctx ++ u) x else 0)).
      * apply qsum_pick_nat; auto. apply (Hc u); auto. left; auto.
      * intros x _. destruct (Nat.eqb x y); ring.
    + rewrite (qsum_ext _ _ (p (ctx ++ u))); [apply S | intros; ring].
Qed.

Lemma assignments_total : forall vs p ctx ns, NoDup vs -> NoDup ns ->
  (forall u, qsum (p (ctx ++ u)) vs == 1) ->
  qsum (weight p ctx) (assignments vs ns) == 1.
Proof.
  intros. pose proof (cylinder vs p ctx (fun _ => None) ns H H0 H1) as C.
  rewrite (qsum_ext _ _ (fun a => weight p ctx a * (if agreeb (fun _ => None) ns a then 1 else 0))).
  - rewrite C by (intros; discriminate). clear. induction ns; [reflexivity|].
    rewrite qprodl_cons, IHns. ring.
  - intros a _. replace (agreeb (fun _ => None) ns a) with true; [ring|].
    unfold agreeb. clear. induction ns; simpl; auto.
Qed.

(* ---------- prefixes ---------- *)

(* sprefix w e: w is a proper prefix of e (w ++ z = e for some non-empty z). *)
Fixpoint sprefix (w e : list nat) : bool :=
  match w, e with
  | [], _ :: _ => true
  | x :: w', y :: e' => Nat.eqb x y && sprefix w' e'
  | _, _ => false
  end.

(* prefixb w e: w is a prefix of e. *)
Fixpoint prefixb (w e : list nat) : bool :=
  match w, e with
  | [], _ => true
  | x :: w', y :: e' => Nat.eqb x y && prefixb w' e'
  | _ :: _, [] => false
  end.

(* The proper prefixes of s, shortest first. *)
Fixpoint prefixes (s : list nat) : list path :=
  match s with
  | [] => []
  | x :: s' => [] :: map (cons x) (prefixes s')
  end.

Lemma sprefix_app : forall w e, sprefix w e = true <-> exists z, e = w ++ z /\ z <> [].
Proof.
  induction w as [|x w IH]; intros [|y e]; simpl.
  - split; [discriminate | intros (z & E & N); subst; contradiction].
  - split; [intros _; exists (y :: e); split; [auto | discriminate] | auto].
  - split; [discriminate | intros (z & E & _); discriminate].
  - rewrite Bool.andb_true_iff, Nat.eqb_eq, IH. split.
    + intros (<- & z & -> & N). exists z. auto.
    + intros (z & E & N). inversion E; subst. split; [auto|]. exists z; auto.
Qed.

Lemma sprefix_length : forall w e, sprefix w e = true -> (length w < length e)%nat.
Proof.
  intros w e H. apply sprefix_app in H as (z & -> & N). rewrite app_length.
  destruct z; [contradiction|]. simpl. lia.
Qed.

Lemma in_prefixes : forall s v, In v (prefixes s) <-> sprefix v s = true.
Proof.
  induction s as [|x s IH]; intros v; simpl.
  - destruct v; simpl; split; (contradiction || discriminate).
  - rewrite in_map_iff. split.
    + intros [<- | (v' & <- & H)]; [reflexivity|]. simpl. rewrite Nat.eqb_refl. apply IH. auto.
    + destruct v as [|y v]; [auto|]. cbn [sprefix]. rewrite Bool.andb_true_iff, Nat.eqb_eq.
      intros (<- & H). right. exists v. split; [auto|]. apply IH. auto.
Qed.

Lemma prefixes_nodup : forall s, NoDup (prefixes s).
Proof.
  induction s as [|x s IH]; simpl; constructor.
  - rewrite in_map_iff. intros (v & E & _). discriminate.
  - apply FinFun.Injective_map_NoDup; auto. intros a b E. inversion E; auto.
Qed.

Lemma prefixes_length : forall s, length (prefixes s) = length s.
Proof. induction s; simpl; auto. rewrite map_length. auto. Qed.

(* The sequential law as a product over the proper prefixes v of s of p (ctx ++ v) s_|v|. *)
Lemma prefixes_prod : forall (p : list nat -> nat -> Q) s ctx,
  qprodl (fun v => p (ctx ++ v) (nth (length v) s 0%nat)) (prefixes s) == seq_prob p ctx s.
Proof.
  intros p. induction s as [|x s IH]; intros ctx; [reflexivity|].
  cbn [prefixes seq_prob]. rewrite qprodl_cons, qprodl_map. rewrite app_nil_r. simpl.
  apply Qmult_comp; [reflexivity|]. rewrite <- IH. apply qprodl_ext. intros v _.
  rewrite <- app_assoc. reflexivity.
Qed.

(* The constraint "the samples along s are s": Y_v = s_|v| for every proper prefix v of s. *)
Definition along (s : list nat) (v : path) : option nat :=
  if sprefix v s then Some (nth (length v) s 0%nat) else None.

(* If every proper prefix of s is a slot, the probability of "the samples along s are s" is
   the sequential law of s. *)
Lemma along_prob : forall vs (p : list nat -> nat -> Q) ctx ns s,
  NoDup vs -> NoDup ns -> (forall c, distribution vs (p c)) -> Forall (fun x => In x vs) s ->
  (forall v, sprefix v s = true -> In v ns) ->
  qsum (fun a => weight p ctx a * (if agreeb (along s) ns a then 1 else 0)) (assignments vs ns)
  == seq_prob p ctx s.
Proof.
  intros vs p ctx ns s Nv Nn Dp Fs Hs. rewrite cylinder; auto.
  - rewrite <- prefixes_prod.
    transitivity (qprodl (fun v => if sprefix v s then p (ctx ++ v) (nth (length v) s 0%nat) else 1) ns).
    { apply qprodl_ext. intros v _. unfold along. destruct (sprefix v s); reflexivity. }
    rewrite <- qprodl_filter. apply qprodl_perm. apply NoDup_Permutation.
    + apply NoDup_filter. auto.
    + apply prefixes_nodup.
    + intros v. rewrite filter_In, in_prefixes. split; [tauto|]. intros H; split; auto.
  - intros c. apply (proj2 (Dp (ctx ++ c))).
  - intros u y _. unfold along. destruct (sprefix u s) eqn:E; [|discriminate].
    intros [= <-]. rewrite Forall_forall in Fs. apply Fs. apply nth_In.
    apply sprefix_length. auto.
Qed.

(* ---------- the emissions of a round ---------- *)

(* possible T f u s: s is what the walk from node u with f steps left emits when the samples
   along s are s (a path of children of u in T, then a bonus that is not a child, or the
   depth limit). *)
Fixpoint possible (T : tree) (fuel : nat) (u : path) (s : list nat) {struct s} : bool :=
  match s with
  | [] => false
  | x :: s' =>
      match fuel with
      | O => match s' with [] => true | _ => false end
      | S f =>
          if in_dec path_eq_dec (u ++ [x]) T then possible T f (u ++ [x]) s'
          else match s' with [] => true | _ => false end
      end
  end.

(* Step 1 and the reading pattern: the walk emits s iff s is possible and the sample at
   each node u ++ v it stands on (v a proper prefix of s) is the next token of s. *)
Lemma walk_iff : forall T a s f u,
  walk T a f u = s <->
  possible T f u s = true /\
  (forall v, sprefix v s = true -> look a (u ++ v) = nth (length v) s 0%nat).
Proof.
  intros T a. induction s as [|x s IH]; intros f u.
  - split; [intros E; destruct f; simpl in E; [|destruct (in_dec _ _ _)]; discriminate|].
    intros [H _]. simpl in H. discriminate.
  - destruct f as [|f]; cbn [walk possible].
    + split.
      * intros [= <- <-]. split; [reflexivity|]. intros v H.
        destruct v as [|y v]; [rewrite app_nil_r; reflexivity|].
        simpl in H. destruct v; rewrite Bool.andb_false_r in H; discriminate.
      * intros [Hp Hl]. destruct s; [|discriminate]. specialize (Hl [] eq_refl).
        rewrite app_nil_r in Hl. simpl in Hl. rewrite Hl. reflexivity.
    + split.
      * intros E. assert (Hx : look a u = x).
        { destruct (in_dec _ _ _); inversion E; auto. }
        rewrite Hx in E. destruct (in_dec path_eq_dec (u ++ [x]) T) as [Hin | Hout].
        -- injection E as E'. apply IH in E' as [Hp Hl]. split; [auto|].
           intros [|y v] Hv; [rewrite app_nil_r; auto|].
           simpl in Hv. apply Bool.andb_true_iff in Hv as [Hy Hv]. apply Nat.eqb_eq in Hy; subst y.
           specialize (Hl v Hv). rewrite <- app_assoc in Hl. simpl. exact Hl.
        -- inversion E; subst s. split; [reflexivity|].
           intros [|y v] Hv; [rewrite app_nil_r; auto|].
           simpl in Hv. destruct v; rewrite Bool.andb_false_r in Hv; discriminate.
      * intros [Hp Hl]. assert (Hx : look a u = x).
        { specialize (Hl [] eq_refl). rewrite app_nil_r in Hl. exact Hl. }
        rewrite Hx. destruct (in_dec path_eq_dec (u ++ [x]) T) as [Hin | Hout].
        -- f_equal. apply IH. split; [auto|]. intros v Hv.
           specialize (Hl (x :: v)). simpl in Hl. rewrite Nat.eqb_refl in Hl.
           rewrite <- app_assoc. apply Hl. exact Hv.
        -- destruct s; [reflexivity | discriminate].
Qed.

Lemma possible_nodes : forall T f u s v, possible T f u s = true -> sprefix v s = true ->
  v = [] \/ In (u ++ v) T.
Proof.
  intros T f u s. revert f u. induction s as [|x s IH]; intros f u v Hp Hv; [discriminate|].
  destruct v as [|y v]; [auto|]. right.
  simpl in Hv. apply Bool.andb_true_iff in Hv as [Hy Hv]. apply Nat.eqb_eq in Hy; subst y.
  destruct f as [|f]; cbn [possible] in Hp.
  - destruct s; [destruct v; discriminate | discriminate].
  - destruct (in_dec path_eq_dec (u ++ [x]) T) as [Hin | Hout].
    + destruct (IH f (u ++ [x]) v Hp Hv) as [-> | H].
      * exact Hin.
      * rewrite <- app_assoc in H. exact H.
    + destruct s; [destruct v; discriminate | discriminate].
Qed.

(* ---------- V3, one round ---------- *)

(* Expectation of g(emission) over the verifier's samples, tree T fixed, depth limit D. *)
Definition round_exp (vs : list nat) (p : list nat -> nat -> Q) (T : tree) (D : nat)
    (ctx : list nat) (g : list nat -> Q) : Q :=
  qsum (fun a => weight p ctx a * g (walk T a D [])) (assignments vs (nodes T)).

(* Probability that the round emits exactly s (accepted path ++ [bonus]). *)
Definition round_prob vs p T D ctx (s : list nat) : Q :=
  round_exp vs p T D ctx (fun e => if list_eq_dec Nat.eq_dec e s then 1 else 0).

Theorem sampling_walk_law : forall vs p T D ctx s,
  NoDup vs -> (forall c, distribution vs (p c)) -> Forall (fun x => In x vs) s ->
  round_prob vs p T D ctx s == if possible T D [] s then seq_prob p ctx s else 0.
Proof.
  intros vs p T D ctx s Nv Dp Fs. unfold round_prob, round_exp.
  destruct (possible T D [] s) eqn:Hp.
  - rewrite <- (along_prob vs p ctx (nodes T) s); auto.
    + apply qsum_ext. intros a _. apply Qmult_comp; [reflexivity|].
      destruct (list_eq_dec Nat.eq_dec (walk T a D []) s) as [E | N];
        destruct (agreeb (along s) (nodes T) a) eqn:A; try reflexivity; exfalso.
      * apply walk_iff in E as [_ Hl]. apply Bool.not_true_iff_false in A. apply A.
        unfold agreeb. apply forallb_forall. intros v _. unfold along.
        destruct (sprefix v s) eqn:Hv; auto. apply Nat.eqb_eq. apply Hl. auto.
      * apply N. apply walk_iff. split; auto. intros v Hv.
        unfold agreeb in A. rewrite forallb_forall in A.
        assert (In v (nodes T)).
        { apply in_nodes. destruct (possible_nodes T D [] s v Hp Hv); auto. }
        specialize (A v H). unfold along in A. rewrite Hv in A. apply Nat.eqb_eq. auto.
    + apply nodes_nodup.
    + intros v Hv. apply in_nodes. destruct (possible_nodes T D [] s v Hp Hv); auto.
  - apply qsum_zero. intros a _.
    destruct (list_eq_dec Nat.eq_dec (walk T a D []) s) as [E | N]; [|ring].
    apply walk_iff in E as [E _]. congruence.
Qed.

(* possible, spelled out: s is a possible emission of the walk from node u with f steps
   left iff 1 <= |s| <= f + 1, every proper non-empty prefix of s extends u to a node of T,
   and the last token is not a child (u ++ s is not in T) unless the depth limit is hit. *)
Lemma possible_spec : forall T s f u,
  possible T f u s = true <->
  (1 <= length s <= S f)%nat /\
  (forall k, (1 <= k < length s)%nat -> In (u ++ firstn k s) T) /\
  (length s = S f \/ ~ In (u ++ s) T).
Proof.
  intros T. induction s as [|x s IH]; intros f u.
  - simpl. split; [discriminate | intros [H _]; lia].
  - destruct f as [|f]; cbn [possible length].
    + split.
      * destruct s; [|discriminate]. intros _. simpl. split; [lia|]. split; [intros; lia | auto].
      * intros [H _]. destruct s; [reflexivity | simpl in H; lia].
    + destruct (in_dec path_eq_dec (u ++ [x]) T) as [Hin | Hout].
      * rewrite IH. split.
        -- intros (H1 & H2 & H3). split; [lia|]. split.
           ++ intros [|[|k]] Hk; [lia | exact Hin |].
              change (firstn (S (S k)) (x :: s)) with (x :: firstn (S k) s).
              replace (u ++ x :: firstn (S k) s) with ((u ++ [x]) ++ firstn (S k) s)
                by (rewrite <- app_assoc; reflexivity). apply H2. simpl in Hk. lia.
           ++ destruct H3 as [H3 | H3]; [left; lia | right].
              rewrite <- app_assoc in H3. exact H3.
        -- intros (H1 & H2 & H3). destruct s as [|y s].
           ++ exfalso. destruct H3 as [H3 | H3]; [simpl in H3; lia | contradiction].
           ++ split; [simpl in *; lia|]. split.
              ** intros k Hk. specialize (H2 (S k)).
                 change (firstn (S k) (x :: y :: s)) with (x :: firstn k (y :: s)) in H2.
                 rewrite <- app_assoc. apply H2. simpl in *. lia.
              ** destruct H3 as [H3 | H3]; [left; simpl in *; lia | right].
                 rewrite <- app_assoc. exact H3.
      * split.
        -- destruct s; [|discriminate]. intros _. simpl. split; [lia|].
           split; [intros; lia | right; exact Hout].
        -- intros (H1 & H2 & H3). destruct s as [|y s]; [reflexivity|].
           exfalso. apply Hout. apply (H2 1%nat). simpl; lia.
Qed.

(* ---------- the finite set of emissions and the expectation over a round ---------- *)

(* All possible emissions over the vocabulary vs. *)
Fixpoint ems (vs : list nat) (T : tree) (fuel : nat) (u : path) : list (list nat) :=
  match fuel with
  | O => map (fun x => [x]) vs
  | S f => flat_map (fun x => if in_dec path_eq_dec (u ++ [x]) T
                              then map (cons x) (ems vs T f (u ++ [x])) else [[x]]) vs
  end.

Lemma ems_spec : forall vs T f u s,
  In s (ems vs T f u) <-> possible T f u s = true /\ Forall (fun x => In x vs) s.
Proof.
  intros vs T. induction f as [|f IH]; intros u s.
  - cbn [ems]. rewrite in_map_iff. split.
    + intros (x & <- & Hx). split; [reflexivity | constructor; auto].
    + intros [Hp Hf]. destruct s as [|x [|y s]]; try discriminate.
      exists x. inversion Hf; auto.
  - cbn [ems]. rewrite in_flat_map. split.
    + intros (x & Hx & Hs). destruct (in_dec path_eq_dec (u ++ [x]) T) as [Hin | Hout].
      * apply in_map_iff in Hs as (s' & <- & Hs'). apply IH in Hs' as [Hp Hf].
        cbn [possible]. destruct (in_dec path_eq_dec (u ++ [x]) T); [|contradiction].
        split; [auto | constructor; auto].
      * destruct Hs as [<- | []]. cbn [possible].
        destruct (in_dec path_eq_dec (u ++ [x]) T); [contradiction|].
        split; [reflexivity | constructor; auto].
    + intros [Hp Hf]. destruct s as [|x s]; [discriminate|]. inversion Hf as [|? ? Hx Hf']; subst.
      exists x. split; [auto|]. cbn [possible] in Hp.
      destruct (in_dec path_eq_dec (u ++ [x]) T) as [Hin | Hout].
      * apply in_map. apply IH. auto.
      * destruct s; [left; auto | discriminate].
Qed.

Lemma NoDup_flat_map_hd : forall (h : nat -> list (list nat)) l, NoDup l ->
  (forall x, In x l -> NoDup (h x)) -> (forall x e, In e (h x) -> hd_error e = Some x) ->
  NoDup (flat_map h l).
Proof.
  intros h l Nl Nh Hd. induction l as [|x l IH]; [constructor|].
  inversion Nl as [|? ? Hx Nl']; subst. cbn [flat_map]. apply NoDup_app_disj.
  - apply Nh. left; auto.
  - apply IH; auto. intros; apply Nh; right; auto.
  - intros e He He'. apply in_flat_map in He' as (y & Hy & He').
    pose proof (Hd x e He). pose proof (Hd y e He'). assert (x = y) by congruence. subst. auto.
Qed.

Lemma ems_nodup : forall vs T f u, NoDup vs -> NoDup (ems vs T f u).
Proof.
  intros vs T f. induction f as [|f IH]; intros u Nv; cbn [ems].
  - apply FinFun.Injective_map_NoDup; auto. intros a b E. inversion E; auto.
  - (* every emission starting from x starts with x *)
    assert (Hd : forall x e, In e (if in_dec path_eq_dec (u ++ [x]) T
                              then map (cons x) (ems vs T f (u ++ [x])) else [[x]]) ->
                 hd_error e = Some x).
    { intros x e. destruct (in_dec _ _ _).
      - rewrite in_map_iff. intros (e' & <- & _). reflexivity.
      - intros [<- | []]. reflexivity. }
    apply NoDup_flat_map_hd; auto. intros x _. destruct (in_dec _ _ _).
    + apply FinFun.Injective_map_NoDup; [intros a b E; inversion E; auto | apply IH; auto].
    + constructor; [intros [] | constructor].
Qed.

Lemma walk_vals : forall vs T a f u, (forall v, In v (nodes T) -> In (look a v) vs) ->
  (u = [] \/ In u T) -> Forall (fun x => In x vs) (walk T a f u).
Proof.
  intros vs T a f. induction f as [|f IH]; intros u Ha Hu; cbn [walk].
  - constructor; [apply Ha, in_nodes; auto | constructor].
  - destruct (in_dec _ _ _) as [Hin | Hout]; constructor; auto; apply Ha, in_nodes; auto.
Qed.

Lemma walk_in_ems : forall vs T D a, In a (assignments vs (nodes T)) ->
  In (walk T a D []) (ems vs T D []).
Proof.
  intros. apply ems_spec. split.
  - apply (proj1 (walk_iff T a (walk T a D []) D []) eq_refl).
  - apply walk_vals; auto. intros v Hv. eapply look_in; eauto.
Qed.

(* V3, one round, as an expectation: for every function g of the emission,
   E[g(emission)] = sum over the possible emissions e of (prod of p along e) * g(e). *)
Theorem sampling_walk_expectation : forall vs p T D ctx (g : list nat -> Q),
  NoDup vs -> (forall c, distribution vs (p c)) ->
  round_exp vs p T D ctx g == qsum (fun e => seq_prob p ctx e * g e) (ems vs T D []).
Proof.
  intros vs p T D ctx g Nv Dp. unfold round_exp.
  set (dec := list_eq_dec Nat.eq_dec).
  transitivity (qsum (fun a => qsum (fun e => weight p ctx a * (if dec (walk T a D []) e then g e else 0))
                                    (ems vs T D [])) (assignments vs (nodes T))).
  { apply qsum_ext. intros a Ha. rewrite qsum_scal_l.
    rewrite (qsum_pick_dec _ dec g); [reflexivity | apply ems_nodup; auto | apply walk_in_ems; auto]. }
  rewrite qsum_swap. apply qsum_ext. intros e He.
  apply ems_spec in He as [Hp Hf].
  pose proof (sampling_walk_law vs p T D ctx e Nv Dp Hf) as L. rewrite Hp in L.
  unfold round_prob, round_exp in L. rewrite <- L, <- qsum_scal_r. apply qsum_ext. intros a _.
  unfold dec. cbv beta. destruct (list_eq_dec _ _ _); ring.
Qed.

(* The emissions' probabilities sum to 1. *)
Theorem sampling_walk_total : forall vs p T D ctx,
  NoDup vs -> (forall c, distribution vs (p c)) ->
  qsum (seq_prob p ctx) (ems vs T D []) == 1.
Proof.
  intros vs p T D ctx Nv Dp.
  pose proof (sampling_walk_expectation vs p T D ctx (fun _ => 1) Nv Dp) as E.
  unfold round_exp in E.
  rewrite (qsum_ext _ (seq_prob p ctx) (fun e => seq_prob p ctx e * 1)) by (intros; ring).
  rewrite <- E. rewrite (qsum_ext _ _ (weight p ctx)) by (intros; ring).
  apply assignments_total; auto. apply nodes_nodup. intros c. apply (proj2 (Dp _)).
Qed.

(* ---------- V3, the whole stream: rounds composed ---------- *)

(* What the rest of the stream must contribute once a round emitted e, for the stream to
   start with y: if e is a prefix of y, the rest must start with the remainder of y (here
   with its sequential law); if y is a prefix of e, nothing more is needed; otherwise 0. *)
Definition cover (p : list nat -> nat -> Q) (c e y : list nat) : Q :=
  if prefixb e y then seq_prob p (c ++ e) (skipn (length e) y)
  else if prefixb y e then 1 else 0.

Lemma cover_nil : forall p c e, cover p c e [] == 1.
Proof. intros. unfold cover. destruct e; reflexivity. Qed.

Lemma cover_cons : forall p c x e z y,
  cover p c (x :: e) (z :: y) == if Nat.eqb x z then cover p (c ++ [x]) e y else 0.
Proof.
  intros. unfold cover. cbn [prefixb length skipn]. rewrite (Nat.eqb_sym z x).
  destruct (Nat.eqb x z); simpl; [|reflexivity].
  rewrite <- app_assoc. reflexivity.
Qed.

Lemma seq_pick : forall vs (p : list nat -> nat -> Q) c y, NoDup vs ->
  (forall c, distribution vs (p c)) -> Forall (fun x => In x vs) y ->
  qsum (fun x => match y with
                 | [] => p c x
                 | z :: y' => if Nat.eqb x z then p c x * seq_prob p (c ++ [x]) y' else 0
                 end) vs == seq_prob p c y.
Proof.
  intros vs p c [|z y] Nv Dp Fy.
  - apply (proj2 (Dp c)).
  - inversion Fy; subst. apply (qsum_pick_nat (fun x => p c x * seq_prob p (c ++ [x]) y)); auto.
Qed.

(* The emissions of one round, weighted by their probability, cover every continuation y
   with its sequential law: sum_e P(e) * cover(e, y) = prod of p along y. *)
Lemma ems_cover : forall vs p T f u c y, NoDup vs -> (forall c, distribution vs (p c)) ->
  Forall (fun x => In x vs) y ->
  qsum (fun e => seq_prob p c e * cover p c e y) (ems vs T f u) == seq_prob p c y.
Proof.
  intros vs p T f. induction f as [|f IH]; intros u c y Nv Dp Fy;
    rewrite <- (seq_pick vs p c y) by auto; cbn [ems].
  - rewrite qsum_map. apply qsum_ext. intros x _. cbn [seq_prob].
    destruct y as [|z y]; [rewrite cover_nil; ring|]. rewrite cover_cons.
    destruct (Nat.eqb x z); [|ring]. unfold cover. cbn [prefixb length skipn]. rewrite app_nil_r. ring.
  - rewrite qsum_flat_map. apply qsum_ext. intros x _.
    destruct (in_dec path_eq_dec (u ++ [x]) T) as [Hin | Hout].
    + rewrite qsum_map. cbn [seq_prob]. destruct y as [|z y].
      * rewrite (qsum_ext _ _ (fun e => p c x * (seq_prob p (c ++ [x]) e * cover p (c ++ [x]) e [])))
          by (intros; rewrite !cover_nil; ring).
        rewrite qsum_scal_l, IH by auto. simpl. ring.
      * inversion Fy; subst.
        rewrite (qsum_ext _ _ (fun e => (if Nat.eqb x z then p c x else 0) *
                                        (seq_prob p (c ++ [x]) e * cover p (c ++ [x]) e y)))
          by (intros; rewrite cover_cons; destruct (Nat.eqb x z); ring).
        rewrite qsum_scal_l, IH by auto. destruct (Nat.eqb x z); ring.
    + cbn [seq_prob]. rewrite qsum_cons, qsum_nil. cbn [seq_prob].
      destruct y as [|z y]; [rewrite cover_nil; ring|]. rewrite cover_cons.
      destruct (Nat.eqb x z); [|ring]. unfold cover. cbn [prefixb length skipn]. rewrite app_nil_r. ring.
Qed.

(* The speculative loop with the sampling walk: the probability that the stream emitted
   from the committed text ctx starts with y. Each round draws its tree from the drafter's
   law draft ctx, a finite list of (weight, tree) pairs (a deterministic drafter is
   [(1, T ctx)]; a drafter with its own randomness is a mixture); the law may depend on
   the committed text in any way, but not on the verifier's samples. The round then draws
   fresh independent samples for the tree's slots and emits walk = accepted path ++
   [bonus]; the next round starts from ctx ++ emission. n bounds the number of rounds
   (each round emits >= 1 token, so n >= |y| suffices). *)
Fixpoint walk_stream (vs : list nat) (p : list nat -> nat -> Q)
    (draft : list nat -> list (Q * tree)) (D : nat) (n : nat) (ctx y : list nat) : Q :=
  match n with
  | O => 1
  | S n' =>
      match y with
      | [] => 1
      | _ :: _ =>
          qsum (fun wT => fst wT *
            qsum (fun a => weight p ctx a *
                    (fun e => if prefixb e y
                              then walk_stream vs p draft D n' (ctx ++ e) (skipn (length e) y)
                              else if prefixb y e then 1 else 0)
                    (walk (snd wT) a D []))
                 (assignments vs (nodes (snd wT))))
            (draft ctx)
      end
  end.

Lemma prefixb_length : forall w e, prefixb w e = true -> (length w <= length e)%nat.
Proof.
  induction w as [|x w IH]; intros [|y e] H; simpl in *; try lia; try discriminate.
  apply Bool.andb_true_iff in H as [_ H]. apply IH in H. lia.
Qed.

Lemma Forall_skipn : forall A (P : A -> Prop) k l, Forall P l -> Forall P (skipn k l).
Proof.
  intros A P k. induction k as [|k IH]; intros [|x l] H; simpl; auto. inversion H; auto.
Qed.

(* V3, the stream: whatever trees the drafter proposes as a function of the committed
   text, the first |y| emitted tokens are y with probability prod_i p(ctx, y_<i)(y_i),
   the law of sequential sampling from p. *)
Theorem sampling_walk_stream : forall vs p draft D,
  NoDup vs -> (forall c, distribution vs (p c)) -> (forall c, qsum fst (draft c) == 1) ->
  forall n ctx y, (length y <= n)%nat -> Forall (fun x => In x vs) y ->
  walk_stream vs p draft D n ctx y == seq_prob p ctx y.
Proof.
  intros vs p draft D Nv Dp Dd. induction n as [|n IH]; intros ctx y Hn Fy.
  - destruct y; [reflexivity | simpl in Hn; lia].
  - destruct y as [|z y']; [reflexivity|]. cbn [walk_stream].
    set (y := z :: y') in *.
    rewrite (qsum_ext _ _ (fun wT => fst wT * seq_prob p ctx y)).
    { rewrite qsum_scal_r, Dd. ring. }
    intros [w T] _. cbn [fst snd]. apply Qmult_comp; [reflexivity|].
    change (qsum _ _) with (round_exp vs p T D ctx
      (fun e => if prefixb e y then walk_stream vs p draft D n (ctx ++ e) (skipn (length e) y)
                else if prefixb y e then 1 else 0)).
    rewrite sampling_walk_expectation by auto.
    rewrite <- (ems_cover vs p T D [] ctx y) by auto.
    apply qsum_ext. intros e He. apply Qmult_comp; [reflexivity|]. unfold cover.
    destruct (prefixb e y) eqn:Hp; [|reflexivity].
    apply IH.
    + rewrite skipn_length. apply ems_spec in He as [He _].
      destruct e; [discriminate|]. simpl in *. lia.
    + apply Forall_skipn. auto.
Qed.

(* ---------- DD8: the expected number of accepted draft tokens ---------- *)

(* Valid tree: the parent of every listed path is the root or listed. *)
Definition prefix_closed (T : tree) : Prop := forall u x, In (u ++ [x]) T -> u = [] \/ In u T.

Lemma prefix_closed_app : forall T, prefix_closed T ->
  forall z w, In (w ++ z) T -> w <> [] -> In w T.
Proof.
  intros T HT z. induction z as [|x z IH] using rev_ind; intros w Hw N.
  - rewrite app_nil_r in Hw. exact Hw.
  - rewrite app_assoc in Hw. apply HT in Hw as [E | Hw].
    + apply app_eq_nil in E as [E _]. contradiction.
    + apply IH; auto.
Qed.

Lemma agreeb_along : forall s ns a, (forall v, sprefix v s = true -> In v ns) ->
  (agreeb (along s) ns a = true <->
   forall v, sprefix v s = true -> look a v = nth (length v) s 0%nat).
Proof.
  intros s ns a Hs. unfold agreeb. rewrite forallb_forall. split.
  - intros A v Hv. specialize (A v (Hs v Hv)). unfold along in A. rewrite Hv in A.
    apply Nat.eqb_eq. auto.
  - intros A v _. unfold along. destruct (sprefix v s) eqn:Hv; auto. apply Nat.eqb_eq. auto.
Qed.

(* The walk from u0 passes through u0 ++ w (w is a proper prefix of its emission) iff the
   depth limit allows it, u0 ++ w and the nodes above it down from u0 are in T, and the
   samples along w are w. *)
Lemma walk_passes : forall T a w f u0,
  sprefix w (walk T a f u0) = true <->
  (length w <= f)%nat /\
  (forall k, (1 <= k <= length w)%nat -> In (u0 ++ firstn k w) T) /\
  (forall v, sprefix v w = true -> look a (u0 ++ v) = nth (length v) w 0%nat).
Proof.
  intros T a. induction w as [|x w IH]; intros f u0.
  - split.
    + intros _. split; [simpl; lia|]. split; [intros; simpl in *; lia|]. intros [|? ?]; discriminate.
    + intros _. destruct f; cbn [walk]; [|destruct (in_dec _ _ _)]; reflexivity.
  - destruct f as [|f].
    + cbn [walk sprefix]. split; [destruct w; rewrite Bool.andb_false_r; discriminate|].
      intros [H _]. simpl in H. lia.
    + cbn [walk]. destruct (in_dec path_eq_dec (u0 ++ [look a u0]) T) as [Hin | Hout].
      * cbn [sprefix]. rewrite Bool.andb_true_iff, Nat.eqb_eq, IH. split.
        -- intros (Hx & H1 & H2 & H3). subst x. split; [simpl; lia|]. split.
           ++ intros [|k] Hk; [lia|]. destruct k as [|k]; [exact Hin|].
              change (firstn (S (S k)) (look a u0 :: w)) with (look a u0 :: firstn (S k) w).
              replace (u0 ++ look a u0 :: firstn (S k) w) with ((u0 ++ [look a u0]) ++ firstn (S k) w)
                by (rewrite <- app_assoc; reflexivity).
              apply H2. simpl in Hk. lia.
           ++ intros [|y v] Hv; [rewrite app_nil_r; reflexivity|].
              cbn [sprefix] in Hv. apply Bool.andb_true_iff in Hv as [Hy Hv].
              apply Nat.eqb_eq in Hy. subst y. specialize (H3 v Hv).
              rewrite <- app_assoc in H3. exact H3.
        -- intros (H1 & H2 & H3). assert (Hx : x = look a u0).
           { specialize (H3 [] eq_refl). rewrite app_nil_r in H3. auto. }
           subst x. split; [reflexivity|]. split; [simpl in H1; lia|]. split.
           ++ intros k Hk. specialize (H2 (S k)).
              change (firstn (S k) (look a u0 :: w)) with (look a u0 :: firstn k w) in H2.
              rewrite <- app_assoc. apply H2. simpl. lia.
           ++ intros v Hv. specialize (H3 (look a u0 :: v)). cbn [sprefix] in H3.
              rewrite Nat.eqb_refl in H3. rewrite <- app_assoc. apply H3. exact Hv.
      * cbn [sprefix]. split.
        -- destruct w; rewrite Bool.andb_false_r; discriminate.
        -- intros (H1 & H2 & H3). exfalso. specialize (H3 [] eq_refl). rewrite app_nil_r in H3.
           simpl in H3. subst x. apply Hout. apply (H2 1%nat). simpl; lia.
Qed.

(* One round: the number of accepted draft tokens is the number of listed nodes the walk
   passes through (nodes of T that are proper prefixes of the emission). *)
Lemma count_emission : forall T D e, NoDup T -> ~ In [] T -> possible T D [] e = true ->
  inject_Z (Z.of_nat (length e - 1)) == qsum (fun u => if sprefix u e then 1 else 0) T.
Proof.
  intros T D e NT Hr Hp. destruct e as [|x e']; [discriminate|].
  transitivity (qsum (fun _ => 1) (filter (fun u => sprefix u (x :: e')) T)); [|apply qsum_filter].
  rewrite (qsum_perm _ _ (filter (fun u => sprefix u (x :: e')) T) (map (cons x) (prefixes e'))).
  - rewrite qsum_const, map_length, prefixes_length. simpl. rewrite Nat.sub_0_r. ring.
  - apply NoDup_Permutation.
    + apply NoDup_filter; auto.
    + pose proof (prefixes_nodup (x :: e')) as N. inversion N; auto.
    + intros v. rewrite filter_In. split.
      * intros [Hv Hs]. apply in_prefixes in Hs. destruct Hs as [<- | Hs]; [contradiction | exact Hs].
      * intros Hv. pose proof (proj1 (in_prefixes (x :: e') v) (or_intror Hv)) as Hs.
        split; [|exact Hs].
        destruct (possible_nodes T D [] (x :: e') v Hp Hs) as [-> | H]; [|exact H].
        apply in_map_iff in Hv as (? & ? & _). discriminate.
Qed.

Lemma accepted_is_count : forall T a D, NoDup T -> ~ In [] T ->
  inject_Z (Z.of_nat (length (walk T a D []) - 1))
  == qsum (fun u => if sprefix u (walk T a D []) then 1 else 0) T.
Proof.
  intros T a D NT Hr. apply (count_emission T D); auto.
  apply (walk_iff T a (walk T a D []) D []). reflexivity.
Qed.

(* DD8: one round of the sampling walk accepts on average sum over the nodes u of T (within
   the depth limit D) of p(u), the probability that sequential sampling from p starts with u. *)
Theorem walk_expected_accepted : forall vs p T D ctx,
  NoDup vs -> (forall c, distribution vs (p c)) ->
  NoDup T -> ~ In [] T -> prefix_closed T -> (forall u, In u T -> Forall (fun x => In x vs) u) ->
  round_exp vs p T D ctx (fun e => inject_Z (Z.of_nat (length e - 1)))
  == qsum (fun u => if Nat.leb (length u) D then seq_prob p ctx u else 0) T.
Proof.
  intros vs p T D ctx Nv Dp NT Hr HT Hv. unfold round_exp.
  rewrite (qsum_ext _ _ (fun a => qsum (fun u => weight p ctx a *
             (if sprefix u (walk T a D []) then 1 else 0)) T))
    by (intros a _; rewrite accepted_is_count, qsum_scal_l by auto; reflexivity).
  rewrite qsum_swap. apply qsum_ext. intros u Hu.
  assert (Hn : forall v, sprefix v u = true -> In v (nodes T)).
  { intros v Hs. apply in_nodes. destruct v as [|y v]; [auto|]. right.
    apply sprefix_app in Hs as (z & Ez & _). apply (prefix_closed_app T HT z); [|discriminate].
    rewrite <- Ez. auto. }
  destruct (Nat.leb (length u) D) eqn:Hl.
  - rewrite <- (along_prob vs p ctx (nodes T) u); auto; [| apply nodes_nodup].
    apply qsum_ext. intros a _. apply Qmult_comp; [reflexivity|].
    destruct (sprefix u (walk T a D [])) eqn:Hw; destruct (agreeb (along u) (nodes T) a) eqn:A;
      try reflexivity; exfalso.
    + apply Bool.not_true_iff_false in A. apply A. apply agreeb_along; auto.
      apply walk_passes in Hw as (_ & _ & H). exact H.
    + apply Bool.not_true_iff_false in Hw. apply Hw. apply (walk_passes T a u D []).
      split; [apply Nat.leb_le; auto|]. split.
      * intros k Hk. simpl. destruct (Nat.eq_dec k (length u)) as [-> | Nk].
        -- rewrite firstn_all. auto.
        -- apply (prefix_closed_app T HT (skipn k u)).
           ++ rewrite firstn_skipn. auto.
           ++ intros E. apply (f_equal (@length nat)) in E. rewrite firstn_length in E.
              simpl in E. lia.
      * intros v Hs. apply (agreeb_along u (nodes T) a Hn); auto.
  - apply qsum_zero. intros a _. destruct (sprefix u (walk T a D [])) eqn:Hw; [|ring].
    apply walk_passes in Hw as (H & _). apply Nat.leb_gt in Hl. lia.
Qed.

(* DD8 when the depth limit does not cut the tree (D >= depth of T, as in specjax where
   max_depth is the tree's depth): E[accepted] = sum_{u in T} p(u). *)
Corollary walk_expected_accepted_full : forall vs p T D ctx,
  NoDup vs -> (forall c, distribution vs (p c)) ->
  NoDup T -> ~ In [] T -> prefix_closed T -> (forall u, In u T -> Forall (fun x => In x vs) u) ->
  (forall u, In u T -> (length u <= D)%nat) ->
  round_exp vs p T D ctx (fun e => inject_Z (Z.of_nat (length e - 1)))
  == qsum (seq_prob p ctx) T.
Proof.
  intros vs p T D ctx Nv Dp NT Hr HT Hv HD. rewrite walk_expected_accepted by auto.
  apply qsum_ext. intros u Hu. apply HD, Nat.leb_le in Hu. rewrite Hu. reflexivity.
Qed.
