(* DDTreeCorollaries.v -- corollaries of DD2/DD10 and G1 (issue 50, item 5).

   Map to the rows of proofs/README.md:
   - DD9 : select_nested                  (the selection with budget N is the first N nodes of
                                           the selection with budget N' >= N: trees nested in N)
           select_surrogate_monotone      (sum of q(u) over the selection is non-decreasing in N)
           select_acceptance_monotone     (from a fixed state -- any rule g, context, depth
                                           limit -- the walk accepts non-decreasingly many
                                           tokens in N, and in expectation under any finite law
                                           on rules: select_expected_acceptance_monotone)
           prune_nested                   (pruning q(u) >= tau keeps the pruned trees nested
                                           in N, for any list: DD10's "nested in N")
           pruned_acceptance_monotone     (hence the walk on the pruned selection accepts
                                           non-decreasingly many tokens in N)
   - GD1 : graft_surrogate_bound          (any duplicate-free set of <= N prefixes -- the
                                           grafted tree included -- has surrogate sum q(u) at
                                           most that of DDTree's N-node selection)

   Model: as DDTreeSelect.v (exact rationals, a raw table tbl of marginals in [0, 1], tokens as
   specjax ranks them) and GraftCoverage.v (the walk is GreedyWalk.accept with any rule
   g : list nat -> nat, which covers the greedy walk and the sampling walk under the coupling
   of proofs/graft.md). *)

From Coq Require Import List Arith Lia QArith Lqa.
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
