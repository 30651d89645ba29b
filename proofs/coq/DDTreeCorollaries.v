(* DDTreeCorollaries.v -- corollaries of DD2/DD10 and G1 (issue 50, item 5).

   Map to the rows of proofs/README.md:
   - DD9 : select_nested                  (the selection with budget N is the first N nodes of
                                           the selection with budget N' >= N: trees nested in N)
           select_surrogate_monotone      (sum of q(u) over the selection is non-decreasing in N)
           select_acceptance_monotone     (from a fixed state -- any rule g, context, depth
                                           limit -- the walk accepts non-decreasingly many
                                           tokens in N, and in expectation under any finite law
                                           on rules: select_expected_acceptance_monotone)
           prune_nested                   (pruning at one fixed tau keeps the pruned trees
                                           nested in N, for any list)
           pruned_acceptance_monotone     (hence, at one fixed tau, the walk on the pruned
                                           selection accepts non-decreasingly many tokens in N)
   - DD10: prune_mass_nested              (at the code's threshold m / N, which falls as N
                                           grows -- mass_threshold_falls -- the tree kept at N
                                           is a subtree of the tree kept at N' >= N)
           prune_mass_nested_sorted       (and an initial part of it when the list is listed
                                           by non-increasing q, the selection's order)
           pruned_mass_acceptance_monotone (the walk on the selection pruned at m / N accepts
                                           non-decreasingly many tokens in N)
   - GD1 : graft_surrogate_bound          (any duplicate-free set of <= N prefixes -- the
                                           grafted tree included -- has surrogate sum q(u) at
                                           most that of DDTree's N-node selection)

   Model: as DDTreeSelect.v (exact rationals, a raw table tbl of marginals in [0, 1], tokens as
   specjax ranks them) and GraftCoverage.v (the walk is GreedyWalk.accept with any rule
   g : list nat -> nat, which covers the greedy walk and the sampling walk under the coupling
   of proofs/graft.md). *)

From Coq Require Import List Arith Lia QArith Lqa Sorting.
From Specjax Require Import GreedyWalk QSums DDTreeSurrogate DDTreeOrder DDTreeSelect GraftCoverage.
Import ListNotations.
Local Open Scope nat_scope.

Lemma In_firstn_any : forall (A : Type) n (l : list A) x, In x (firstn n l) -> In x l.
Proof.
  intros A n l x H. rewrite <- (firstn_skipn n l). apply in_or_app. left; exact H.
Qed.

(* DD9: the optimal trees are nested in N. *)
Theorem select_nested : forall tbl V L N N', N <= N' ->
  select tbl V L N = firstn N (select tbl V L N').
Proof.
  intros tbl V L N N' HN.
  destruct (existence_of_the_order (rq tbl V) V L) as [He Hs].
  rewrite !(select_spec tbl V L _ _ He Hs), firstn_map, firstn_firstn, Nat.min_l by exact HN.
  reflexivity.
Qed.

Lemma select_subtree : forall tbl V L N N', N <= N' ->
  subtree (select tbl V L N) (select tbl V L N').
Proof.
  intros tbl V L N N' HN u Hu. rewrite (select_nested tbl V L N N' HN) in Hu.
  exact (In_firstn_any _ _ _ _ Hu).
Qed.

(* DD9: the surrogate sum q(u) of the selection is non-decreasing in N. *)
Theorem select_surrogate_monotone : forall tbl V L N N', table_ok tbl V L -> N <= N' ->
  (qsum (qp (qt tbl)) (select tbl V L N) <= qsum (qp (qt tbl)) (select tbl V L N'))%Q.
Proof.
  intros tbl V L N N' Hok HN.
  destruct (select_proposition2 tbl V L N Hok) as (_ & ND & HP & Hlen & _).
  destruct (select_proposition2 tbl V L N' Hok) as (_ & _ & _ & _ & Hopt).
  apply Hopt; auto. rewrite Hlen. lia.
Qed.

(* DD9: from a fixed state, the walk accepts non-decreasingly many tokens in N (pointwise,
   for every rule g: the greedy walk, or the sampling walk with its samples fixed). *)
Theorem select_acceptance_monotone : forall tbl V L N N' g ctx D, N <= N' ->
  length (accept g (select tbl V L N) ctx [] D) <= length (accept g (select tbl V L N') ctx [] D).
Proof.
  intros. apply walk_monotone. apply select_subtree. exact H.
Qed.

Corollary select_expected_acceptance_monotone : forall tbl V L N N' w ctx D,
  law_nonneg w -> N <= N' ->
  (A w (select tbl V L N) ctx D <= A w (select tbl V L N') ctx D)%Q.
Proof.
  intros. apply expected_walk_monotone; auto. apply select_subtree. exact H0.
Qed.

Lemma firstn_add : forall (A : Type) n k (l : list A),
  firstn (n + k) l = firstn n l ++ firstn k (skipn n l).
Proof.
  intros A n; induction n as [|n IH]; intros k l; [reflexivity|].
  destruct l as [|x l]; simpl; [destruct k; reflexivity|]. f_equal. apply IH.
Qed.

(* DD10 / DD9: pruning (keep the first node and every node with f(u) >= tau) keeps trees
   nested in N: the pruned tree for N is an initial part of the pruned tree for N' >= N. *)
Theorem prune_nested : forall f tau (l : list (list nat)) N N', 1 <= N <= N' ->
  exists r, prune f tau (firstn N' l) = prune f tau (firstn N l) ++ r.
Proof.
  intros f tau l N N' HN.
  replace N' with (N + (N' - N)) by lia. rewrite firstn_add.
  destruct N as [|N]; [lia|]. destruct l as [|x l]; [exists []; simpl; destruct (N' - S N); reflexivity|].
  cbn [firstn skipn app prune]. rewrite filter_app.
  exists (filter (fun u => Qle_bool tau (f u)) (firstn (N' - S N) (skipn N l))). reflexivity.
Qed.

(* ---------- pruning at the code's threshold m / N (issue 61, item 2) ---------- *)

(* DDTreeDrafter prunes its N-node selection at q(u) >= prune_mass / N (ddtree.py,
   log_min_prob): the threshold falls as N grows, so prune_nested (one fixed tau) does not
   cover it. What holds: the threshold m / N' is at most m / N; the tree kept at N is a
   subtree of the tree kept at N' (for any list and any f); when the list is listed by
   non-increasing f -- the code's selection order -- it is even an initial part of it; and
   the walk accepts non-decreasingly many tokens in N. *)

Lemma mass_threshold_falls : forall m N N', (0 <= m)%Q -> 1 <= N <= N' ->
  (m / qnat N' <= m / qnat N)%Q.
Proof.
  intros m N N' Hm HN.
  assert (HqN : (1 <= qnat N)%Q) by (unfold qnat, Qle; simpl; lia).
  assert (HqN' : (qnat N <= qnat N')%Q) by (unfold qnat, Qle; simpl; lia).
  apply Qle_shift_div_r; [lra|].
  setoid_replace (m / qnat N * qnat N')%Q with (m * (qnat N' / qnat N))%Q
    by (field; intro H0; rewrite H0 in HqN; lra).
  assert (Hr : (1 <= qnat N' / qnat N)%Q) by (apply Qle_shift_div_l; lra).
  setoid_replace m with (1 * m)%Q at 1 by ring.
  setoid_replace (m * (qnat N' / qnat N))%Q with (qnat N' / qnat N * m)%Q by ring.
  apply Qmult_le_compat_r; auto.
Qed.

Lemma prune_threshold_subtree : forall f tau tau' (l : list (list nat)) N N',
  1 <= N <= N' -> (tau' <= tau)%Q ->
  subtree (prune f tau (firstn N l)) (prune f tau' (firstn N' l)).
Proof.
  intros f tau tau' l N N' HN Ht u Hu.
  destruct N as [|N]; [lia|]. destruct N' as [|N']; [lia|].
  destruct l as [|x l]; [exact Hu|]. cbn [firstn prune] in *.
  destruct Hu as [<-|Hu]; [left; reflexivity|right].
  apply filter_In in Hu as [Hin Hq]. apply filter_In. split.
  - rewrite <- (firstn_skipn N (firstn N' l)), firstn_firstn, Nat.min_l by lia.
    apply in_or_app. left. exact Hin.
  - apply Qle_bool_iff in Hq. apply Qle_bool_iff. lra.
Qed.

(* DD10 with the code's threshold: the tree pruned at m / N (from the first N nodes) is a
   subtree of the tree pruned at m / N' (from the first N'), N <= N'. *)
Theorem prune_mass_nested : forall f m (l : list (list nat)) N N', (0 <= m)%Q -> 1 <= N <= N' ->
  subtree (prune f (m / qnat N) (firstn N l)) (prune f (m / qnat N') (firstn N' l)).
Proof.
  intros f m l N N' Hm HN. apply prune_threshold_subtree; auto.
  apply mass_threshold_falls; auto.
Qed.

Lemma filter_threshold_prefix : forall (f : list nat -> Q) tau tau' (l : list (list nat)) n n',
  StronglySorted (fun u w => (f w <= f u)%Q) l -> (tau' <= tau)%Q -> n <= n' ->
  exists r, filter (fun u => Qle_bool tau' (f u)) (firstn n' l)
            = filter (fun u => Qle_bool tau (f u)) (firstn n l) ++ r.
Proof.
  intros f tau tau' l. induction l as [|x l IH]; intros n n' HS Ht Hn.
  { exists []. rewrite !firstn_nil. reflexivity. }
  destruct n as [|n].
  { exists (filter (fun u => Qle_bool tau' (f u)) (firstn n' (x :: l))). reflexivity. }
  destruct n' as [|n']; [lia|].
  apply StronglySorted_inv in HS as [HS HF]. rewrite Forall_forall in HF. cbn [firstn filter].
  destruct (Qle_bool tau (f x)) eqn:E.
  - assert (E' : Qle_bool tau' (f x) = true) by (apply Qle_bool_iff; apply Qle_bool_iff in E; lra).
    rewrite E'. destruct (IH n n' HS Ht ltac:(lia)) as [r Hr]. exists r. rewrite Hr. reflexivity.
  - rewrite (filter_none _ (fun u => Qle_bool tau (f u)) (firstn n l)).
    + eexists. cbn [app]. reflexivity.
    + intros y Hy. destruct (Qle_bool tau (f y)) eqn:Ey; [|reflexivity].
      apply Qle_bool_iff in Ey. assert (f y <= f x)%Q by (apply HF; exact (In_firstn_any _ _ _ _ Hy)).
      assert (Qle_bool tau (f x) = true) by (apply Qle_bool_iff; lra). congruence.
Qed.

(* The same as lists, when l is listed by non-increasing f (DDTree's selection order): the
   tree kept at N is an initial part of the tree kept at N'. *)
Theorem prune_mass_nested_sorted : forall f m (l : list (list nat)) N N', (0 <= m)%Q -> 1 <= N <= N' ->
  StronglySorted (fun u w => (f w <= f u)%Q) l ->
  exists r, prune f (m / qnat N') (firstn N' l) = prune f (m / qnat N) (firstn N l) ++ r.
Proof.
  intros f m l N N' Hm HN HS.
  destruct N as [|N]; [lia|]. destruct N' as [|N']; [lia|].
  destruct l as [|x l]; [exists []; reflexivity|]. cbn [firstn prune].
  apply StronglySorted_inv in HS as [HS _].
  destruct (filter_threshold_prefix f (m / qnat (S N)) (m / qnat (S N')) l N N' HS
              (mass_threshold_falls m (S N) (S N') Hm HN) ltac:(lia)) as [r Hr].
  exists r. rewrite Hr. reflexivity.
Qed.

(* Hence, with the code's threshold, the walk on DDTree's pruned selection accepts
   non-decreasingly many tokens in N (pointwise, any rule g). *)
Theorem pruned_mass_acceptance_monotone : forall tbl V L N N' f m g ctx D, (0 <= m)%Q -> 1 <= N <= N' ->
  length (accept g (prune f (m / qnat N) (select tbl V L N)) ctx [] D)
  <= length (accept g (prune f (m / qnat N') (select tbl V L N')) ctx [] D).
Proof.
  intros tbl V L N N' f m g ctx D Hm HN. apply walk_monotone.
  rewrite (select_nested tbl V L N N') by lia.
  intros u Hu. pose proof (prune_mass_nested f m (select tbl V L N') N N' Hm HN u Hu) as H.
  rewrite firstn_all2 in H; [exact H|].
  destruct (existence_of_the_order (rq tbl V) V L) as [He Hs].
  rewrite (select_spec tbl V L _ _ He Hs), map_length, firstn_length. lia.
Qed.

(* Hence the walk on DDTree's pruned selection accepts non-decreasingly many tokens in N. *)
Theorem pruned_acceptance_monotone : forall tbl V L N N' f tau g ctx D, 1 <= N <= N' ->
  length (accept g (prune f tau (select tbl V L N)) ctx [] D)
  <= length (accept g (prune f tau (select tbl V L N')) ctx [] D).
Proof.
  intros tbl V L N N' f tau g ctx D HN. apply walk_monotone.
  rewrite (select_nested tbl V L N N') by lia.
  destruct (prune_nested f tau (select tbl V L N') N N' HN) as [r Hr].
  rewrite (firstn_all2 (select tbl V L N')) in Hr.
  2: { destruct (existence_of_the_order (rq tbl V) V L) as [He Hs].
       rewrite (select_spec tbl V L _ _ He Hs), map_length, firstn_length. lia. }
  intros u Hu. rewrite Hr. apply in_or_app. left; exact Hu.
Qed.

(* GD1 (b): the grafted tree -- any duplicate-free set of at most N prefixes (depth 1..L,
   tokens < V), valid or not -- has a surrogate sum q(u) at most that of DDTree's own
   selection of N nodes: select_proposition2's optimality, restated for the graft. *)
Theorem graft_surrogate_bound : forall tbl V L N G, table_ok tbl V L ->
  NoDup G -> (forall u, In u G -> is_prefix V L u) -> length G <= N ->
  (qsum (qp (qt tbl)) G <= qsum (qp (qt tbl)) (select tbl V L N))%Q.
Proof.
  intros tbl V L N G Hok ND HP HN.
  destruct (select_proposition2 tbl V L N Hok) as (_ & _ & _ & _ & Hopt). auto.
Qed.
