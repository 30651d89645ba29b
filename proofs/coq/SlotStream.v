(* SlotStream.v -- the slot-level sampling loop has the target's law (V2 + V3; issue 61).

   Map to the rows of proofs/README.md:
   - V3 (slot level) : slot_walk_canonical  (on any tree laid out parents first -- duplicate
                                             valid siblings and invalid nodes included -- the slot
                                             walk only enters "canonical" slots: the lowest-index
                                             valid copy among siblings, below canonical slots;
                                             whatever the per-slot targets, it is the walk of the
                                             canonical subtree, which has valid parents and
                                             distinct siblings)
                       slot_round_exp       (one round: the expectation of any function of the
                                             emission over the verifier's independent samples at
                                             EVERY slot of the block, sample at slot s drawn from
                                             the law at the tree-attention output of s, is
                                             SamplingWalk.round_exp on the canonical paths)
                       slot_stream_law      (the loop: the drafter a state machine with a finite
                                             law of trees; each round verifies [root, T] over the
                                             committed cache, draws the samples, walks the slots,
                                             emits accepted + bonus, commits the root and the
                                             accepted slots (models.cache.commit) and updates the
                                             drafter from its state, the text, the tree, the path
                                             slots, every slot's sample and every layer's output:
                                             for every finite y the stream starts with y with
                                             probability prod_i p(text, y_<i)(y_i), p the law of
                                             sequential decoding)

   Model: LoopSlots.v's slot walk and dtree (parents1, tokens, valid; slot 0 the root) and
   TreeAttention.v's abstract stack (the verify forward tx over the committed cache, exact
   ancestor mask, positions len + depth); StreamHist.v's probability model (exact rationals,
   finite sums over the verifier's samples and the drafter's finite law). What the code does
   per round (decode.speculative_round with verify.sampling_walk): sample_targets draws one
   token at every slot 0..N of the block, independently, from the processed target law at that
   slot's logits (lawf: any function from a layer-L output to a law on vs -- temperature,
   top-k, top-p are inside it); walk(tree, samples, max_depth) follows the lowest-index valid
   child carrying the current slot's sample; the emission is the accepted tokens and the bonus;
   commit keeps the root and the accepted slots. EOS / max-token truncation and batch rows are
   not repeated here (LoopTrunc.v, LoopBatch.v: they are functions of the emitted stream). The
   law p c = lawf (hid M L c) is the law sequential decoding samples from. Not covered: chain
   rejection (ChainRejection.v / StreamHist.chain_rejection_stream_hist keep their own model),
   float32 sampling. *)

From Coq Require Import List Arith Lia Bool QArith Lqa.
From Specjax Require Import QSums GreedyWalk ChainRejection SamplingWalk TreeAttention LoopSlots SlotSampling.
Import ListNotations.
Local Open Scope nat_scope.

(* ---------- canonical slots ---------- *)

(* Slot a is the copy the walk would enter from its parent with its token. *)
Definition canon_node (par tok : nat -> nat) (valid : nat -> bool) (ns a : nat) : bool :=
  valid a && match match_child par tok valid ns (par a) (tok a) with Some c => Nat.eqb c a | None => false end.

(* Every slot on the root path below the root is canonical. *)
Definition cvalid (par tok : nat -> nat) (valid : nat -> bool) (ns c : nat) : bool :=
  forallb (canon_node par tok valid ns) (tl (anc par c)).

Lemma tl_anc_S : forall par n c, tree_ok par n -> 0 < c < n -> tl (anc par c) = tl (anc par (par c)) ++ [c].
Proof.
  intros par n c Hok Hc. assert (Hp : par c < c) by (apply Hok; lia).
  rewrite (anc_S par n c Hok Hc), (anc_head par n (par c) Hok) by lia. reflexivity.
Qed.

Lemma cvalid_S : forall par tok valid ns c, tree_ok par ns -> 0 < c < ns ->
  cvalid par tok valid ns c = cvalid par tok valid ns (par c) && canon_node par tok valid ns c.
Proof.
  intros par tok valid ns c Hok Hc. unfold cvalid at 1. rewrite (tl_anc_S par ns c Hok Hc), forallb_app.
  simpl. rewrite andb_true_r. reflexivity.
Qed.

Lemma cvalid_0 : forall par tok valid ns, cvalid par tok valid ns 0 = true.
Proof. reflexivity. Qed.

Lemma cvalid_valid : forall par tok valid ns c, tree_ok par ns -> 0 < c < ns ->
  cvalid par tok valid ns c = true -> valid c = true.
Proof.
  intros par tok valid ns c Hok Hc H. rewrite cvalid_S in H by auto.
  apply andb_true_iff in H as [_ H]. unfold canon_node in H. apply andb_true_iff in H as [H _]. exact H.
Qed.

Lemma cvalid_closed : forall par tok valid ns, tree_ok par ns -> valid_closed par (cvalid par tok valid ns) ns.
Proof.
  intros par tok valid ns Hok c Hc H. rewrite cvalid_S in H by auto.
  apply andb_true_iff in H as [H _]. destruct (Nat.eq_dec (par c) 0); auto.
Qed.

Lemma cvalid_distinct : forall par tok valid ns, tree_ok par ns ->
  distinct_siblings par tok (cvalid par tok valid ns) ns.
Proof.
  intros par tok valid ns Hok c d Hc Hd Hvc Hvd Hp Ht.
  rewrite cvalid_S in Hvc, Hvd by auto.
  apply andb_true_iff in Hvc as [_ Hc']. apply andb_true_iff in Hvd as [_ Hd'].
  unfold canon_node in Hc', Hd'. apply andb_true_iff in Hc' as [_ Hc']. apply andb_true_iff in Hd' as [_ Hd'].
  rewrite Hp, Ht in Hc'.
  destruct (match_child par tok valid ns (par d) (tok d)); [|discriminate].
  apply Nat.eqb_eq in Hc', Hd'. congruence.
Qed.

Lemma find_sub : forall (f g : nat -> bool) l c, (forall x, In x l -> f x = true -> g x = true) ->
  find g l = Some c -> f c = true -> find f l = Some c.
Proof.
  intros f g l; induction l as [|x l IH]; intros c Hs Hg Hf; simpl in *; [discriminate|].
  destruct (g x) eqn:Gx.
  - injection Hg as <-. rewrite Hf. reflexivity.
  - destruct (f x) eqn:Fx; [rewrite (Hs x (or_introl eq_refl) Fx) in Gx; discriminate|].
    apply IH; auto.
Qed.

Lemma find_sub_none : forall (f g : nat -> bool) l, (forall x, In x l -> f x = true -> g x = true) ->
  find g l = None -> find f l = None.
Proof.
  intros f g l; induction l as [|x l IH]; intros Hs Hg; simpl in *; [reflexivity|].
  destruct (g x) eqn:Gx; [discriminate|].
  destruct (f x) eqn:Fx; [rewrite (Hs x (or_introl eq_refl) Fx) in Gx; discriminate|]. auto.
Qed.

(* From a canonical slot, the walk's step on the canonical subtree is its step on the tree. *)
Lemma match_child_cvalid : forall par tok valid ns s t, tree_ok par ns -> s < ns ->
  cvalid par tok valid ns s = true ->
  match_child par tok (cvalid par tok valid ns) ns s t = match_child par tok valid ns s t.
Proof.
  intros par tok valid ns s t Hok Hs Hcs. unfold match_child at 1.
  assert (Hsub : forall x, In x (seq 1 (pred ns)) ->
            is_child par tok (cvalid par tok valid ns) s t x = true -> is_child par tok valid s t x = true).
  { intros x Hx H. apply in_seq in Hx. unfold is_child in *.
    apply andb_true_iff in H as [H Ht]. apply andb_true_iff in H as [Hv Hp].
    rewrite (cvalid_valid par tok valid ns x Hok ltac:(lia) Hv), Hp, Ht. reflexivity. }
  destruct (match_child par tok valid ns s t) as [c|] eqn:E.
  - apply (find_sub _ _ _ c Hsub E).
    destruct (match_child_some _ _ _ _ _ _ _ E) as (Hc & Hv & Hp & Ht).
    unfold is_child. rewrite Hp, Ht, !Nat.eqb_refl, andb_true_r, andb_true_r.
    rewrite cvalid_S by auto. rewrite Hp, Hcs. simpl. unfold canon_node. rewrite Hv, Hp, Ht, E, Nat.eqb_refl.
    reflexivity.
  - exact (find_sub_none _ _ _ Hsub E).
Qed.

(* The walk never leaves the canonical slots: on any tree, with any targets, it is the walk
   of the canonical subtree. *)
Theorem slot_walk_canonical : forall par tok valid ns tg fuel s, tree_ok par ns -> s < ns ->
  cvalid par tok valid ns s = true ->
  slot_walk par tok (cvalid par tok valid ns) ns tg fuel s = slot_walk par tok valid ns tg fuel s.
Proof.
  intros par tok valid ns tg fuel; induction fuel as [|f IH]; intros s Hok Hs Hcs; [reflexivity|].
  simpl. rewrite (match_child_cvalid par tok valid ns s (tg s) Hok Hs Hcs).
  destruct (match_child par tok valid ns s (tg s)) as [c|] eqn:E; [|reflexivity].
  f_equal. apply IH; auto.
  - destruct (match_child_some _ _ _ _ _ _ _ E) as (Hc & _). lia.
  - rewrite <- (match_child_cvalid par tok valid ns s (tg s) Hok Hs Hcs) in E.
    destruct (match_child_some _ _ _ _ _ _ _ E) as (_ & Hv & _). exact Hv.
Qed.

(* Every slot the walk visits is the start or a v-valid slot of the block. *)
Lemma slot_walk_slots : forall par tok v ns tg fuel s x,
  In x (slot_walk par tok v ns tg fuel s) -> x = s \/ (0 < x < ns /\ v x = true).
Proof.
  intros par tok v ns tg fuel; induction fuel as [|f IH]; intros s x Hx; simpl in Hx.
  - destruct Hx as [<- | []]; auto.
  - destruct (match_child par tok v ns s (tg s)) as [c|] eqn:E; simpl in Hx.
    + destruct Hx as [<- | Hx]; auto. right.
      destruct (match_child_some _ _ _ _ _ _ _ E) as (Hc & Hv & _).
      destruct (IH c x Hx) as [-> | H]; auto.
    + destruct Hx as [<- | []]; auto.
Qed.

(* The walk reads the targets only at the slots it visits. *)
Lemma slot_walk_ext : forall par tok v ns tg1 tg2 fuel s,
  (forall x, x = s \/ (0 < x < ns /\ v x = true) -> tg1 x = tg2 x) ->
  slot_walk par tok v ns tg1 fuel s = slot_walk par tok v ns tg2 fuel s.
Proof.
  intros par tok v ns tg1 tg2 fuel; induction fuel as [|f IH]; intros s H; [reflexivity|].
  simpl. rewrite (H s (or_introl eq_refl)).
  destruct (match_child par tok v ns s (tg2 s)) as [c|] eqn:E; [|reflexivity].
  destruct (match_child_some _ _ _ _ _ _ _ E) as (Hc & Hv & _).
  f_equal. apply IH. intros x [-> | Hx]; apply H; auto.
Qed.

Lemma in_last : forall (l : list nat) d, l <> [] -> In (last l d) l.
Proof.
  intros l d; induction l as [|x l IH]; intros H; [congruence|].
  destruct l as [|y l]; [left; reflexivity|]. right. apply IH. discriminate.
Qed.

Lemma emitted_ext : forall par tok v ns tg1 tg2 D,
  (forall x, x = 0 \/ (0 < x < ns /\ v x = true) -> tg1 x = tg2 x) ->
  emitted tok tg1 (slot_walk par tok v ns tg1 D 0) = emitted tok tg2 (slot_walk par tok v ns tg2 D 0).
Proof.
  intros par tok v ns tg1 tg2 D H. rewrite (slot_walk_ext par tok v ns tg1 tg2 D 0 H).
  unfold emitted. f_equal. f_equal. apply H. apply (slot_walk_slots par tok v ns tg2 D 0).
  apply in_last. rewrite slot_walk_hd. discriminate.
Qed.

(* ---------- the verifier's samples at every slot ---------- *)

(* One sample per slot: a list of (slot, token). *)
Definition sassign := list (nat * nat).

Fixpoint sassigns (vs : list nat) (S : list nat) : list sassign :=
  match S with
  | [] => [[]]
  | s :: S' => flat_map (fun x => map (cons (s, x)) (sassigns vs S')) vs
  end.

(* Its probability: independent samples, slot s's from the law w s. *)
Fixpoint sweight (w : nat -> nat -> Q) (sg : sassign) : Q :=
  match sg with
  | [] => 1
  | (s, x) :: sg' => (w s x * sweight w sg')%Q
  end.

(* The sample at slot s (verify.sample_targets' entry s). *)
Fixpoint slook (sg : sassign) (s : nat) : nat :=
  match sg with
  | [] => 0
  | (t, x) :: sg' => if Nat.eqb t s then x else slook sg' s
  end.

(* The samples at the kept slots, keyed by the slots' paths: SamplingWalk's assignment. *)
Definition to_paths (key : nat -> path) (keep : nat -> bool) (sg : sassign) : assignment :=
  map (fun sx => (key (fst sx), snd sx)) (filter (fun sx => keep (fst sx)) sg).

(* Marginalising the samples at the slots that are not kept, and renaming the kept ones by
   their paths, turns the law of the slot samples into SamplingWalk's law of assignments. *)
Lemma push_samples : forall vs p ctx (key : nat -> path) keep (w : nat -> nat -> Q) S (F : assignment -> Q),
  (forall s x, In s S -> keep s = true -> w s x == p (ctx ++ key s) x)%Q ->
  (forall s, In s S -> keep s = false -> qsum (w s) vs == 1)%Q ->
  (qsum (fun sg => sweight w sg * F (to_paths key keep sg)) (sassigns vs S)
   == qsum (fun a => weight p ctx a * F a) (assignments vs (map key (filter keep S))))%Q.
Proof.
  intros vs p ctx key keep w S; induction S as [|s S IH]; intros F Hk Hd.
  - cbn [sassigns assignments filter map]. rewrite !qsum_cons, !qsum_nil. unfold to_paths. simpl. ring.
  - cbn [sassigns filter]. rewrite qsum_flat_map.
    destruct (keep s) eqn:Ks.
    + cbn [map assignments]. rewrite qsum_flat_map. apply qsum_ext. intros x _.
      rewrite !qsum_map. cbn [sweight weight].
      rewrite (qsum_ext _ _ (fun sg => w s x * (sweight w sg * (fun a => F ((key s, x) :: a)) (to_paths key keep sg)))%Q).
      2: { intros sg _. unfold to_paths. cbn [filter fst snd]. rewrite Ks. cbn [map fst snd]. ring. }
      rewrite qsum_scal_l, (IH (fun a => F ((key s, x) :: a))) by (intros; auto using in_cons).
      rewrite <- qsum_scal_l. apply qsum_ext. intros a _. rewrite Hk by (auto using in_eq). ring.
    + rewrite (qsum_ext _ _ (fun x => w s x * qsum (fun sg => sweight w sg * F (to_paths key keep sg)) (sassigns vs S))%Q).
      2: { intros x _. rewrite qsum_map, <- qsum_scal_l. apply qsum_ext. intros sg _. cbn [sweight].
           unfold to_paths. cbn [filter fst]. rewrite Ks. ring. }
      rewrite qsum_scal_r, Hd by (auto using in_eq). rewrite IH by (intros; auto using in_cons). ring.
Qed.

Lemma sassigns_keys : forall vs S sg, In sg (sassigns vs S) -> map fst sg = S.
Proof.
  intros vs S; induction S as [|s S IH]; intros sg H; simpl in H.
  - destruct H as [<- | []]. reflexivity.
  - apply in_flat_map in H as (x & _ & H). apply in_map_iff in H as (sg' & <- & H). simpl. f_equal. auto.
Qed.

(* The sample read at a kept slot through its path is the slot's own sample, when no other
   kept slot has the same path. *)
Lemma look_to_paths : forall key keep (sg : sassign) s,
  NoDup (map fst sg) -> In s (map fst sg) -> keep s = true ->
  (forall t, In t (map fst sg) -> keep t = true -> key t = key s -> t = s) ->
  look (to_paths key keep sg) (key s) = slook sg s.
Proof.
  intros key keep sg s; induction sg as [|[t x] sg IH]; intros Nd Hs Hk Hinj; [destruct Hs|].
  simpl in Nd, Hs. inversion Nd as [|? ? Ht Nd']; subst. unfold to_paths. cbn [filter fst snd slook].
  destruct (keep t) eqn:Kt.
  - cbn [map fst snd look]. destruct (Nat.eqb_spec t s) as [-> | Hne].
    + destruct (path_eq_dec (key s) (key s)); congruence.
    + destruct (path_eq_dec (key t) (key s)) as [E | _].
      * exfalso. apply Hne. apply Hinj; auto. left; reflexivity.
      * destruct Hs as [-> | Hs]; [congruence|]. apply IH; auto. intros; apply Hinj; auto. right; auto.
  - destruct (Nat.eqb_spec t s) as [-> | Hne]; [congruence|].
    destruct Hs as [-> | Hs]; [congruence|]. apply IH; auto. intros; apply Hinj; auto. right; auto.
Qed.

(* ---------- one round ---------- *)

Lemma spath_0 : forall tok par, spath tok par 0 = [].
Proof. reflexivity. Qed.

(* The canonical paths with the root are SamplingWalk's slots of the canonical tree. *)
Lemma canonical_nodes : forall par tok valid ns, tree_ok par ns -> 0 < ns ->
  let cv := cvalid par tok valid ns in
  map (spath tok par) (filter cv (seq 0 ns)) = nodes (paths par tok cv ns).
Proof.
  intros par tok valid ns Hok Hn cv.
  assert (Hcl := cvalid_closed par tok valid ns Hok). assert (Hds := cvalid_distinct par tok valid ns Hok).
  fold cv in Hcl, Hds.
  destruct ns as [|n]; [lia|]. rewrite <- cons_seq. cbn [filter]. unfold cv at 1. rewrite cvalid_0.
  cbn [map]. rewrite spath_0. unfold nodes. symmetry. apply nodup_fixed_point.
  unfold paths. cbn [pred]. constructor.
  - intro H. apply in_map_iff in H as (c & Hc & Hin). apply filter_In in Hin as [Hin _]. apply in_seq in Hin.
    assert (Hl := spath_length tok par (S n) c Hok ltac:(lia)). rewrite Hc in Hl.
    rewrite (depth_S par (S n) c Hok) in Hl by lia. discriminate.
  - apply NoDup_map_inj_gen; [|apply NoDup_filter, seq_NoDup].
    intros x y Hx Hy E. apply filter_In in Hx as [Hx Hvx]. apply filter_In in Hy as [Hy Hvy].
    apply in_seq in Hx. apply in_seq in Hy.
    apply (spath_injective par tok cv (S n) Hok Hcl Hds (length (spath tok par x))); auto; lia.
Qed.

(* The slot walk fed the slot samples emits SamplingWalk's walk on the canonical tree, fed
   the same samples keyed by path. *)
Lemma slot_emission_is_walk : forall vs par tok valid ns D sg, tree_ok par ns -> 0 < ns ->
  In sg (sassigns vs (seq 0 ns)) ->
  let cv := cvalid par tok valid ns in
  emitted tok (slook sg) (slot_walk par tok valid ns (slook sg) D 0)
  = SamplingWalk.walk (paths par tok cv ns) (to_paths (spath tok par) cv sg) D [].
Proof.
  intros vs par tok valid ns D sg Hok Hn Hsg cv.
  assert (Hcl := cvalid_closed par tok valid ns Hok). assert (Hds := cvalid_distinct par tok valid ns Hok).
  fold cv in Hcl, Hds.
  rewrite <- (slot_walk_canonical par tok valid ns (slook sg) D 0 Hok Hn (cvalid_0 _ _ _ _)). fold cv.
  rewrite (emitted_ext par tok cv ns (slook sg) (fun s => look (to_paths (spath tok par) cv sg) (spath tok par s)) D).
  - apply slot_sampling_walk_eq; auto.
  - assert (Hk := sassigns_keys vs (seq 0 ns) sg Hsg).
    intros x Hx. symmetry. apply look_to_paths; try rewrite Hk.
    + apply seq_NoDup.
    + apply in_seq. destruct Hx as [-> | Hx]; lia.
    + destruct Hx as [-> | [_ Hx]]; [apply cvalid_0 | exact Hx].
    + intros t Ht Hvt E. apply in_seq in Ht.
      apply (spath_injective par tok cv ns Hok Hcl Hds (length (spath tok par t))); auto.
      all: destruct Hx as [-> | [? Hx]]; auto; try lia.
Qed.

(* One round at the slot level: samples at every slot of the block, slot s's law the target's
   law after the text and the path of s (what exact tree attention gives: slot_stream_law
   derives it from TreeAttention.tree_attention_exact), any function G of the emission: its
   expectation is SamplingWalk.round_exp on the canonical tree, hence (sampling_walk_law /
   sampling_walk_expectation) the emission has the sequential law. *)
Theorem slot_round_exp : forall vs p par tok valid ns ctx (w : nat -> nat -> Q) D (G : list nat -> Q),
  tree_ok par ns -> 0 < ns -> (forall c, distribution vs (p c)) ->
  (forall s x, (s < ns)%nat -> w s x == p (ctx ++ spath tok par s) x)%Q ->
  (qsum (fun sg => sweight w sg * G (emitted tok (slook sg) (slot_walk par tok valid ns (slook sg) D 0)))
        (sassigns vs (seq 0 ns))
   == round_exp vs p (paths par tok (cvalid par tok valid ns) ns) D ctx G)%Q.
Proof.
  intros vs p par tok valid ns ctx w D G Hok Hn Dp Hw.
  set (cv := cvalid par tok valid ns).
  set (F := fun a => G (SamplingWalk.walk (paths par tok cv ns) a D [])).
  transitivity (qsum (fun sg => sweight w sg * F (to_paths (spath tok par) cv sg)) (sassigns vs (seq 0 ns)))%Q.
  { apply qsum_ext. intros sg Hsg. unfold F. rewrite (slot_emission_is_walk vs par tok valid ns D sg Hok Hn Hsg).
    reflexivity. }
  transitivity (qsum (fun a => weight p ctx a * F a) (assignments vs (map (spath tok par) (filter cv (seq 0 ns)))))%Q.
  2: { unfold round_exp. unfold cv. rewrite (canonical_nodes par tok valid ns Hok Hn). reflexivity. }
  apply push_samples.
  - intros s x Hs _. apply in_seq in Hs. apply Hw. lia.
  - intros s Hs _. apply in_seq in Hs. rewrite (qsum_ext _ _ (p (ctx ++ spath tok par s))).
    + apply (proj2 (Dp _)).
    + intros x _. apply Hw. lia.
Qed.

(* ---------- the loop ---------- *)

(* P(the stream starts with y), within n rounds, from drafter state st, committed cache C
   (holding ctx) and root. Each round: the drafter's finite law of (tree, state after
   proposing); the verify forward of [root, T] over C; one sample per slot from lawf of the
   slot's layer-L output; the slot walk; the emission; commit of the root and the accepted
   slots; the drafter's update from its state, the text, the tree, the path slots, the
   samples at every slot and every layer's output at every slot. *)
Fixpoint slot_stream {St X K : Type} (vs : list nat) (M : model X K) (lawf : X -> nat -> Q) (L D : nat)
    (draft : St -> list nat -> list (Q * (dtree * St)))
    (upd : St -> list nat -> dtree -> list nat -> (nat -> nat) -> (nat -> nat -> X) -> St)
    (n : nat) (st : St) (C : cache K) (ctx : list nat) (root : nat) (y : list nat) : Q :=
  match n with
  | O => 1%Q
  | S n' =>
      match y with
      | [] => 1%Q
      | _ :: _ =>
          qsum (fun wT =>
            let T := fst (snd wT) in
            let tok := slot_tok T root in
            let ns := S (n_nodes T) in
            let out := gout M C ctx root T in
            Qmult (fst wT)
            (qsum (fun sg =>
                    let P := slot_walk (slot_par T) tok (slot_valid T) ns (slook sg) D 0 in
                    let e := emitted tok (slook sg) P in
                    Qmult (sweight (fun s x => lawf (out L s) x) sg)
                    (if prefixb e y
                     then slot_stream vs M lawf L D draft upd n' (upd (snd (snd wT)) (ctx ++ [root]) T (path_slots P D) (slook sg) out)
                            (gcommit M D C ctx root T P (S (num_accepted P)))
                            (ctx ++ map tok P) (last e root) (skipn (length e) y)
                     else if prefixb y e then 1%Q else 0%Q))
                 (sassigns vs (seq 0 ns))))
            (draft st (ctx ++ [root]))
      end
  end.

(* The commit of a round and the text it leaves. *)
Lemma slot_commit_exact : forall {X K} (M : model X K) C ctx root T D tg,
  dtree_ok T -> (forall l, C l = ents M l ctx) ->
  let par := slot_par T in
  let tok := slot_tok T root in
  let ns := S (n_nodes T) in
  let pos := fun j => length ctx + node_depth par j in
  let P := slot_walk par tok (slot_valid T) ns tg D 0 in
  (forall l, commit C (tkv M C tok pos (ancestor_mask par) ns) (path_slots P D) (S (num_accepted P)) l
             = ents M l (ctx ++ map tok P))
  /\ (ctx ++ map tok P) ++ [last (emitted tok tg P) root] = (ctx ++ [root]) ++ emitted tok tg P.
Proof.
  intros X K M C ctx root T D tg HT HC par tok ns pos P.
  pose proof (dtree_tree_ok T HT) as Hok. fold par ns in Hok.
  assert (HP : P = 0 :: tl P) by apply slot_walk_hd.
  split.
  - intro l. unfold path_slots, num_accepted.
    assert (Hm : S (pred (length P)) = length P) by (rewrite HP; reflexivity).
    rewrite Hm.
    assert (Hf : firstn (length P) (P ++ repeat 0 (S D - length P)) = P).
    { rewrite firstn_app, Nat.sub_diag, firstn_all. simpl. apply app_nil_r. }
    pose proof (commit_exact M C ctx tok par ns (P ++ repeat 0 (S D - length P)) (length P)
                  Hok ltac:(unfold ns; lia) HC) as Hc.
    rewrite Hf in Hc. exact (Hc (slot_walk_root_path par tok (slot_valid T) ns tg D) l).
  - unfold emitted. rewrite last_last. rewrite HP at 1. cbn [map]. rewrite <- !app_assoc. reflexivity.
Qed.

(* V2 + V3 at the slot level: the sampling loop over slots, with any drafter with memory
   whose trees are laid out parents first (duplicate siblings and invalid nodes allowed),
   started from the sequential cache of ctx, emits every finite y with probability
   prod_i p(ctx ++ [root] ++ y_<i)(y_i), p c = lawf (hid M L c) the law of sequential
   sampling. *)
Theorem slot_stream_law : forall {St X K : Type} vs (M : model X K) (lawf : X -> nat -> Q) L D
    (draft : St -> list nat -> list (Q * (dtree * St))) upd,
  NoDup vs -> (forall c, distribution vs (lawf (hid M L c))) ->
  (forall st c, qsum fst (draft st c) == 1)%Q ->
  (forall st c wT, In wT (draft st c) -> dtree_ok (fst (snd wT))) ->
  let p := fun c => lawf (hid M L c) in
  forall n st C ctx root y, (forall l, C l = ents M l ctx) -> (length y <= n)%nat -> Forall (fun x => In x vs) y ->
  (slot_stream vs M lawf L D draft upd n st C ctx root y == seq_prob p (ctx ++ [root]) y)%Q.
Proof.
  intros St X K vs M lawf L D draft upd Nv Dp Dd Hok p n.
  induction n as [|n IH]; intros st C ctx root y HC Hn Fy.
  - destruct y; [reflexivity | simpl in Hn; lia].
  - destruct y as [|z y']; [reflexivity|]. cbn [slot_stream]. set (y := z :: y') in *.
    rewrite (qsum_ext _ _ (fun wT => fst wT * seq_prob p (ctx ++ [root]) y))%Q.
    { rewrite qsum_scal_r, Dd. ring. }
    intros [w [T st']] HwT. cbn [fst snd] in *. unfold gout, gcommit, rpos. cbv beta zeta. apply Qmult_comp; [reflexivity|].
    pose proof (Hok _ _ _ HwT) as HT. cbn [fst snd] in HT.
    pose proof (dtree_tree_ok T HT) as Htree.
    set (par := slot_par T). set (tok := slot_tok T root). set (ns := S (n_nodes T)).
    set (pos := fun j => length ctx + node_depth par j).
    set (ctx1 := ctx ++ [root]).
    transitivity (qsum (fun sg => sweight (fun s x => lawf (tx M C tok pos (ancestor_mask par) ns L s) x) sg
                    * cover p ctx1 (emitted tok (slook sg) (slot_walk par tok (slot_valid T) ns (slook sg) D 0)) y)
                    (sassigns vs (seq 0 ns)))%Q.
    { apply qsum_ext. intros sg _. apply Qmult_comp; [reflexivity|].
      destruct (slot_commit_exact M C ctx root T D (slook sg) HT HC) as [Hc Ht]. fold par tok ns pos in Hc, Ht.
      unfold cover.
      destruct (prefixb (emitted tok (slook sg) (slot_walk par tok (slot_valid T) ns (slook sg) D 0)) y) eqn:Hp;
        [|reflexivity].
      rewrite IH.
      - rewrite Ht. reflexivity.
      - exact Hc.
      - rewrite skipn_length. unfold emitted. rewrite app_length. unfold y in *. cbn [length] in *. lia.
      - apply Forall_skipn. exact Fy. }
    rewrite (slot_round_exp vs p par tok (slot_valid T) ns ctx1 _ D (fun e => cover p ctx1 e y)); auto.
    + rewrite sampling_walk_expectation by auto. apply ems_cover; auto.
    + unfold ns; lia.
    + intros s x Hs. unfold p, ctx1, pos.
      destruct (tree_attention_exact M C ctx tok par ns Htree HC L s Hs) as [E _]. rewrite E.
      rewrite (path_tokens_spath tok par ns s Htree Hs). unfold tok at 1. cbn [slot_tok].
      rewrite <- app_assoc. reflexivity.
Qed.
