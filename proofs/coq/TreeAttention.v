(* TreeAttention.v -- exactness of tree attention (V2), for an abstract attention stack.

   Map to the rows of proofs/README.md:
   - V2  : tree_attention_exact   (every node's input/output and KV entry at every layer equal
                                   those of sequential decoding of context ++ path(i))
           tree_attention_exact_rows (the same, node by node, for any mask and positions that
                                   are right on the node's ancestors: padding nodes and
                                   ancestor_mask(tree, max_depth) rows past max_depth)
           commit_exact           (committing the slots of an accepted root path gives the cache
                                   of sequential decoding of context ++ the path's tokens)
           sequential_decoding_spec (the causal semantics used below is what token-by-token
                                   decoding with a growing KV cache computes)

   Model (what is abstract; see proofs/README.md, "Machine-checked (Coq)"):
   - tokens and positions are nat; there are no floats and no softmax. A model is a record of
     three arbitrary functions: an embedding emb : token -> X, the KV entry of a token at
     layer l, kvf l p x, a function of its position p and its layer-l input x (so RoPE-style
     position-dependent keys are covered), and the layer itself, att l p x E : X, the output of
     layer l for a query at position p with layer-l input x that sees the ordered list E of
     (position, KV) entries (itself included). Nothing is assumed of att (not even that it
     ignores the order of E); the layer-(l+1) input is the layer-l output; a stack of L
     layers is the first L of them and the logits are any function of the layer-L input, so
     the theorems, stated for every layer l, cover every depth L and every head.
   - A KV cache is, per layer, the list of (position, KV) entries of its slots in slot order;
     masked slots are simply absent from the list a query sees (an exact zero weight).
   - Sequential decoding of a sequence s (positions 0..|s|-1): the token at index j has layer-l
     input hid l (s_0..s_j) and writes the entry (j, kvf l j (hid l (s_0..s_j))); ents l s is
     the layer-l cache after s. sequential_decoding_spec shows that seq_decode (one token at a
     time, each attending to the cache and itself, then appending its entry) computes exactly
     these.
   - The tree, as specjax lays out the verify block [root, tree tokens]: slots 0..n-1, slot 0
     the root (the last committed token, not yet in the cache), tok j the token of slot j,
     par j the parent slot of slot j > 0 with par j < j (Tree.parents + 1, parents before
     children), anc i the slots from the root down to i, path(i) = path_tokens tok par i
     their tokens, node_depth i = |anc i| - 1 (compute_depth), positions len + node_depth i
     (node_positions, len = |ctx| = the cache length), and the ancestor mask
     ancestor_mask par i j (row(0) = e_0, row(i) = row(par i) | e_i: tree.ancestor_mask with
     max_depth = None). Each node at layer l sees the committed cache C l (always visible,
     cache_attention_mask) followed by the entries of the block slots its mask row allows, in
     slot order (models.layers.attend over slots 0..S-1).
   - commit C blk slots m: the first m path slots' pending entries appended to C, in order
     (models.cache.commit: slot slots[j] moves to lengths + j, lengths += m). *)

From Coq Require Import List Arith Lia Bool.
Import ListNotations.

(* ---------- the abstract model ---------- *)

Record model (X K : Type) := mk_model {
  emb : nat -> X;                                 (* token -> layer-0 input *)
  kvf : nat -> nat -> X -> K;                     (* layer, position, layer input -> KV *)
  att : nat -> nat -> X -> list (nat * K) -> X    (* layer, position, input, visible entries *)
}.
Arguments emb {X K} m _.
Arguments kvf {X K} m _ _ _.
Arguments att {X K} m _ _ _ _.

(* A cache: per layer, the (position, KV) entries of its slots in slot order. *)
Definition cache (K : Type) := nat -> list (nat * K).

(* ---------- sequential decoding (causal semantics) ---------- *)

(* hid M l s: the layer-l input of the last token of s when s is decoded sequentially from
   position 0 (hid M (S l) s is that token's layer-l output). *)
Fixpoint hid {X K} (M : model X K) (l : nat) (s : list nat) : X :=
  match l with
  | O => emb M (last s 0)
  | S l' => att M l' (pred (length s)) (hid M l' s)
              (map (fun j => (j, kvf M l' j (hid M l' (firstn (S j) s)))) (seq 0 (length s)))
  end.

(* ents M l s: the layer-l KV cache after decoding s sequentially. *)
Definition ents {X K} (M : model X K) (l : nat) (s : list nat) : list (nat * K) :=
  map (fun j => (j, kvf M l j (hid M l (firstn (S j) s)))) (seq 0 (length s)).

Lemma hid_S : forall {X K} (M : model X K) l s,
  hid M (S l) s = att M l (pred (length s)) (hid M l s) (ents M l s).
Proof. reflexivity. Qed.

(* Token-by-token decoding with a KV cache: the token t at position p, given the cache C of
   the earlier tokens, has layer-l input xin M C p t l; at each layer it appends its entry and
   attends to the cache and itself. *)
Fixpoint xin {X K} (M : model X K) (C : cache K) (p t l : nat) : X :=
  match l with
  | O => emb M t
  | S l' => att M l' p (xin M C p t l') (C l' ++ [(p, kvf M l' p (xin M C p t l'))])
  end.

Definition step {X K} (M : model X K) (C : cache K) (p t : nat) : cache K :=
  fun l => C l ++ [(p, kvf M l p (xin M C p t l))].

Fixpoint seq_decode {X K} (M : model X K) (C : cache K) (p : nat) (ts : list nat) : cache K :=
  match ts with
  | [] => C
  | t :: ts' => seq_decode M (step M C p t) (S p) ts'
  end.

Definition empty_cache {K} : cache K := fun _ => [].

Lemma xin_ext : forall {X K} (M : model X K) C C' p t,
  (forall l, C l = C' l) -> forall l, xin M C p t l = xin M C' p t l.
Proof.
  intros X K M C C' p t H l; induction l; simpl; auto.
  rewrite IHl, H; reflexivity.
Qed.

Lemma decode_ext : forall {X K} (M : model X K) ts C C' p,
  (forall l, C l = C' l) -> forall l, seq_decode M C p ts l = seq_decode M C' p ts l.
Proof.
  intros X K M ts; induction ts as [|t ts IH]; intros C C' p H l; simpl; auto.
  apply IH; intro l'; unfold step; rewrite H, (xin_ext M C C' p t H); reflexivity.
Qed.

Lemma firstn_S_app_one : forall (s : list nat) t j,
  j < length s -> firstn (S j) (s ++ [t]) = firstn (S j) s.
Proof.
  intros s t j Hj; rewrite firstn_app.
  replace (S j - length s) with 0 by lia; simpl; apply app_nil_r.
Qed.

Lemma ents_snoc : forall {X K} (M : model X K) l s t,
  ents M l (s ++ [t]) = ents M l s ++ [(length s, kvf M l (length s) (hid M l (s ++ [t])))].
Proof.
  intros; unfold ents.
  rewrite app_length, seq_app, map_app; cbn [length seq map Nat.add].
  f_equal.
  - apply map_ext_in; intros j Hj; apply in_seq in Hj.
    rewrite firstn_S_app_one by lia; reflexivity.
  - rewrite firstn_all2 by (rewrite app_length; simpl; lia); reflexivity.
Qed.

Lemma hid_snoc : forall {X K} (M : model X K) l s t,
  hid M l (s ++ [t]) = xin M (fun l => ents M l s) (length s) t l.
Proof.
  intros X K M l s t; induction l.
  - simpl; rewrite last_last; reflexivity.
  - rewrite hid_S, ents_snoc, IHl, app_length; cbn [xin length].
    replace (pred (length s + 1)) with (length s) by lia; reflexivity.
Qed.

Lemma decode_from : forall {X K} (M : model X K) ts s l,
  seq_decode M (fun l => ents M l s) (length s) ts l = ents M l (s ++ ts).
Proof.
  intros X K M ts; induction ts as [|t ts IH]; intros s l; simpl.
  - rewrite app_nil_r; reflexivity.
  - rewrite (decode_ext M ts _ (fun l => ents M l (s ++ [t])) (S (length s))).
    + replace (S (length s)) with (length (s ++ [t])) by (rewrite app_length; simpl; lia).
      rewrite IH, <- app_assoc; reflexivity.
    + intro l'; unfold step; rewrite ents_snoc, hid_snoc; reflexivity.
Qed.

(* Token-by-token decoding of s from an empty cache leaves, at every layer, the cache ents M l s,
   and the next token t (at position |s|) then has layer-l input hid M l (s ++ [t]). *)
Theorem sequential_decoding_spec : forall {X K} (M : model X K) s t l,
  seq_decode M empty_cache 0 s l = ents M l s
  /\ xin M (seq_decode M empty_cache 0 s) (length s) t l = hid M l (s ++ [t]).
Proof.
  intros X K M s t l.
  assert (E : forall l, seq_decode M empty_cache 0 s l = ents M l s).
  { intro l'; rewrite (decode_ext M s empty_cache (fun l => ents M l []) 0) by reflexivity.
    apply (decode_from M s [] l'). }
  split; [apply E|].
  rewrite hid_snoc; apply xin_ext; exact E.
Qed.

(* ---------- trees as specjax lays them out ---------- *)

(* Slots from the root (slot 0) down to i, computed with fuel (S i suffices, par j < j). *)
Fixpoint anc_f (par : nat -> nat) (f i : nat) : list nat :=
  match f with
  | O => []
  | S f' => if Nat.eqb i 0 then [0] else anc_f par f' (par i) ++ [i]
  end.

Definition anc (par : nat -> nat) (i : nat) : list nat := anc_f par (S i) i.

(* compute_depth: depth 0 = 0, depth i = depth (par i) + 1. *)
Definition node_depth (par : nat -> nat) (i : nat) : nat := pred (length (anc par i)).

(* ancestor_mask (max_depth = None): row(0) = e_0, row(i) = row(par i) | e_i. *)
Fixpoint mask_f (par : nat -> nat) (f i j : nat) : bool :=
  match f with
  | O => false
  | S f' => Nat.eqb i j || (negb (Nat.eqb i 0) && mask_f par f' (par i) j)
  end.

Definition ancestor_mask (par : nat -> nat) (i j : nat) : bool := mask_f par (S i) i j.

(* Slot-0 root, parents before children. *)
Definition tree_ok (par : nat -> nat) (n : nat) : Prop := forall i, 0 < i < n -> par i < i.

(* The tokens of the root path to slot i. *)
Definition path_tokens (tok : nat -> nat) (par : nat -> nat) (i : nat) : list nat := map tok (anc par i).

Lemma anc_f_fuel : forall par f g i, tree_ok par (S i) -> i < f -> i < g ->
  anc_f par f i = anc_f par g i.
Proof.
  intros par f; induction f as [|f IH]; intros g i Hok Hf Hg; [lia|].
  destruct g as [|g]; [lia|]; simpl.
  destruct (Nat.eqb_spec i 0) as [->|Hi]; auto.
  assert (par i < i) by (apply Hok; lia).
  rewrite (IH g); auto; [|lia|lia].
  intros k Hk; apply Hok; lia.
Qed.

Lemma tree_ok_le : forall par n m, tree_ok par n -> m <= n -> tree_ok par m.
Proof. intros par n m H Hm k Hk; apply H; lia. Qed.

Lemma anc_0 : forall par, anc par 0 = [0].
Proof. reflexivity. Qed.

Lemma anc_S : forall par n i, tree_ok par n -> 0 < i < n -> anc par i = anc par (par i) ++ [i].
Proof.
  intros par n i Hok Hi; unfold anc at 1; simpl.
  destruct (Nat.eqb_spec i 0) as [->|_]; [lia|].
  f_equal; destruct i as [|i]; [lia|].
  assert (par (S i) < S i) by (apply Hok; lia).
  apply anc_f_fuel; [apply (tree_ok_le par n); [exact Hok | lia] | lia | lia].
Qed.

Lemma anc_snoc : forall par n i, tree_ok par n -> i < n -> exists A, anc par i = A ++ [i].
Proof.
  intros par n i Hok Hi; destruct (Nat.eq_dec i 0) as [->|H0].
  - exists []; reflexivity.
  - exists (anc par (par i)); apply (anc_S par n); auto; lia.
Qed.

Lemma anc_length : forall par n i, tree_ok par n -> i < n -> 1 <= length (anc par i).
Proof.
  intros par n i Hok Hi; destruct (anc_snoc par n i Hok Hi) as [A ->].
  rewrite app_length; simpl; lia.
Qed.

Lemma anc_le : forall par n i, tree_ok par n -> i < n -> forall j, In j (anc par i) -> j <= i.
Proof.
  intros par n i Hok; induction i as [i IH] using lt_wf_ind; intros Hi j Hj.
  destruct (Nat.eq_dec i 0) as [->|H0].
  - rewrite anc_0 in Hj; destruct Hj as [<-|[]]; lia.
  - rewrite (anc_S par n) in Hj by (auto; lia).
    assert (par i < i) by (apply Hok; lia).
    apply in_app_or in Hj; destruct Hj as [Hj|[<-|[]]]; [|lia].
    specialize (IH (par i) H ltac:(lia) j Hj); lia.
Qed.

(* The ancestor list of the d-th slot on the root path to i is the first d+1 slots of it. *)
Lemma anc_prefix : forall par n i, tree_ok par n -> i < n ->
  forall d, d < length (anc par i) -> firstn (S d) (anc par i) = anc par (nth d (anc par i) 0).
Proof.
  intros par n i Hok; induction i as [i IH] using lt_wf_ind; intros Hi d Hd.
  destruct (Nat.eq_dec i 0) as [->|H0].
  - rewrite anc_0 in *; simpl in Hd; destruct d; [reflexivity|lia].
  - assert (Hp : par i < i) by (apply Hok; lia).
    rewrite (anc_S par n i) in * by (auto; lia).
    rewrite app_length in Hd; simpl in Hd.
    destruct (Nat.lt_ge_cases d (length (anc par (par i)))) as [Hlt|Hge].
    + rewrite app_nth1 by lia; rewrite firstn_app.
      replace (S d - length (anc par (par i))) with 0 by lia.
      rewrite app_nil_r; apply IH; auto; lia.
    + replace d with (length (anc par (par i))) by lia.
      rewrite nth_middle, firstn_all2 by (rewrite app_length; simpl; lia).
      symmetry; apply (anc_S par n); auto; lia.
Qed.

Lemma anc_nth_lt : forall par n i, tree_ok par n -> i < n ->
  forall d, d < length (anc par i) -> nth d (anc par i) 0 < n.
Proof.
  intros par n i Hok Hi d Hd.
  pose proof (anc_le par n i Hok Hi (nth d (anc par i) 0) (nth_In _ _ Hd)); lia.
Qed.

Lemma depth_nth : forall par n i, tree_ok par n -> i < n ->
  forall d, d < length (anc par i) -> node_depth par (nth d (anc par i) 0) = d.
Proof.
  intros par n i Hok Hi d Hd; unfold node_depth.
  rewrite <- (anc_prefix par n i Hok Hi d Hd), firstn_length; lia.
Qed.

Lemma in_firstn : forall (A : Type) m (l : list A) x, In x (firstn m l) -> In x l.
Proof.
  intros A m; induction m as [|m IH]; intros l x H; [destruct H|].
  destruct l as [|a l]; [destruct H|]; simpl in *; destruct H; auto.
Qed.

Lemma anc_sub : forall par n i, tree_ok par n -> i < n ->
  forall j, In j (anc par i) -> forall k, In k (anc par j) -> In k (anc par i).
Proof.
  intros par n i Hok Hi j Hj k Hk.
  destruct (In_nth _ _ 0 Hj) as [d [Hd <-]].
  rewrite <- (anc_prefix par n i Hok Hi d Hd) in Hk.
  exact (in_firstn _ _ _ _ Hk).
Qed.

Lemma depth_0 : forall par, node_depth par 0 = 0.
Proof. reflexivity. Qed.

Lemma depth_S : forall par n i, tree_ok par n -> 0 < i < n -> node_depth par i = S (node_depth par (par i)).
Proof.
  intros par n i Hok Hi; unfold node_depth; rewrite (anc_S par n i Hok Hi), app_length; simpl.
  pose proof (anc_length par n (par i) Hok ltac:(pose proof (Hok i Hi); lia)); lia.
Qed.

(* The mask row of i is membership in anc i. *)
Lemma mask_f_anc : forall par f i j,
  mask_f par f i j = existsb (Nat.eqb j) (anc_f par f i).
Proof.
  intros par f; induction f as [|f IH]; intros i j; simpl; auto.
  destruct (Nat.eqb_spec i 0) as [->|Hi]; simpl.
  - rewrite Nat.eqb_sym, !orb_false_r; reflexivity.
  - rewrite existsb_app, IH; simpl; rewrite orb_false_r, Nat.eqb_sym, orb_comm; reflexivity.
Qed.

Lemma ancestor_mask_anc : forall par i j,
  ancestor_mask par i j = existsb (Nat.eqb j) (anc par i).
Proof. intros; apply mask_f_anc. Qed.

Lemma filter_false_seq : forall (P : nat -> bool) a m,
  (forall j, a <= j -> P j = false) -> filter P (seq a m) = [].
Proof.
  intros P a m; revert a; induction m as [|m IH]; intros a H; simpl; auto.
  rewrite H by lia; apply IH; intros; apply H; lia.
Qed.

Lemma filter_snoc_seq : forall (P : nat -> bool) i n,
  i < n -> (forall j, P j = true -> j < i) ->
  filter (fun j => P j || Nat.eqb j i) (seq 0 n) = filter P (seq 0 n) ++ [i].
Proof.
  intros P i n Hi HP.
  replace n with (i + (1 + (n - S i))) by lia.
  rewrite !seq_app, !filter_app; simpl.
  assert (HPi : P i = false) by (destruct (P i) eqn:E; auto; specialize (HP i E); lia).
  rewrite Nat.eqb_refl, orb_true_r, HPi.
  assert (Hhi : forall j, i + 1 <= j -> P j = false)
    by (intros j Hj; destruct (P j) eqn:E; auto; specialize (HP j E); lia).
  rewrite (filter_false_seq P (i + 1)) by exact Hhi.
  rewrite (filter_false_seq (fun j => P j || Nat.eqb j i) (i + 1))
    by (intros j Hj; rewrite Hhi by lia; apply Nat.eqb_neq; lia).
  rewrite (filter_ext_in (fun j => P j || Nat.eqb j i) P (seq 0 i)).
  - rewrite !app_nil_r; reflexivity.
  - intros j Hj; apply in_seq in Hj; replace (Nat.eqb j i) with false
      by (symmetry; apply Nat.eqb_neq; lia); apply orb_false_r.
Qed.

(* specjax's ancestor mask row of slot i selects exactly anc i, in slot order. *)
Lemma ancestor_mask_row : forall par n i, tree_ok par n -> i < n ->
  filter (ancestor_mask par i) (seq 0 n) = anc par i.
Proof.
  intros par n i Hok; induction i as [i IH] using lt_wf_ind; intros Hi.
  destruct (Nat.eq_dec i 0) as [->|H0].
  - rewrite anc_0.
    replace n with (1 + (n - 1)) by lia; rewrite seq_app, filter_app; simpl.
    rewrite filter_false_seq; auto.
    intros j Hj; unfold ancestor_mask, mask_f; rewrite orb_false_r; apply Nat.eqb_neq; lia.
  - assert (Hp : par i < i) by (apply Hok; lia).
    rewrite (filter_ext (ancestor_mask par i)
               (fun j => ancestor_mask par (par i) j || Nat.eqb j i)).
    + rewrite filter_snoc_seq; auto.
      * rewrite IH by lia; symmetry; apply (anc_S par n); auto; lia.
      * intros j Hj; rewrite ancestor_mask_anc, existsb_exists in Hj.
        destruct Hj as [k [Hk Hjk]]; apply Nat.eqb_eq in Hjk; subst k.
        pose proof (anc_le par n (par i) Hok ltac:(lia) j Hk); lia.
    + intro j; rewrite !ancestor_mask_anc, (anc_S par n i) by (auto; lia).
      rewrite existsb_app; simpl; rewrite orb_false_r; reflexivity.
Qed.

(* ---------- tree decoding: one forward over the block ---------- *)

(* tx M C tok pos vis n l i: the layer-l input of slot i when the block of n slots (tokens tok,
   positions pos, mask rows vis) is run over the committed cache C. *)
Fixpoint tx {X K} (M : model X K) (C : cache K) (tok pos : nat -> nat)
         (vis : nat -> nat -> bool) (n l i : nat) : X :=
  match l with
  | O => emb M (tok i)
  | S l' => att M l' (pos i) (tx M C tok pos vis n l' i)
              (C l' ++ map (fun j => (pos j, kvf M l' (pos j) (tx M C tok pos vis n l' j)))
                           (filter (vis i) (seq 0 n)))
  end.

(* The KV entry slot j writes at layer l. *)
Definition tkv {X K} (M : model X K) (C : cache K) (tok pos : nat -> nat)
           (vis : nat -> nat -> bool) (n l j : nat) : nat * K :=
  (pos j, kvf M l (pos j) (tx M C tok pos vis n l j)).

(* Slot j's mask row and position are those of specjax for a tree node. *)
Definition row_ok (par : nat -> nat) (vis : nat -> nat -> bool) (pos : nat -> nat)
           (len n j : nat) : Prop :=
  filter (vis j) (seq 0 n) = anc par j /\ pos j = len + node_depth par j.

Lemma ents_split : forall {X K} (M : model X K) C ctx tok pos vis par n l i,
  tree_ok par n -> i < n -> (forall l, C l = ents M l ctx) ->
  (forall j, In j (anc par i) -> pos j = length ctx + node_depth par j) ->
  (forall j, In j (anc par i) -> tx M C tok pos vis n l j = hid M l (ctx ++ path_tokens tok par j)) ->
  ents M l (ctx ++ path_tokens tok par i) = C l ++ map (tkv M C tok pos vis n l) (anc par i).
Proof.
  intros X K M C ctx tok pos vis par n l i Hok Hi HC Hpos Htx.
  unfold ents, path_tokens; rewrite app_length, map_length, seq_app, map_app, HC; f_equal.
  - unfold ents; apply map_ext_in; intros j Hj; apply in_seq in Hj.
    rewrite firstn_app; replace (S j - length ctx) with 0 by lia.
    rewrite app_nil_r; reflexivity.
  - set (f := fun j => (j, kvf M l j (hid M l (firstn (S j) (ctx ++ map tok (anc par i)))))).
    apply nth_ext with (d := f 0) (d' := tkv M C tok pos vis n l 0).
    { rewrite !map_length, seq_length; reflexivity. }
    intros d Hd; rewrite map_length, seq_length in Hd.
    rewrite map_nth, seq_nth, map_nth by lia.
    set (a := nth d (anc par i) 0).
    assert (Ha : In a (anc par i)) by (apply nth_In; lia).
    unfold tkv; rewrite Hpos, Htx by exact Ha.
    unfold a; rewrite (depth_nth par n i Hok Hi d Hd); unfold f, path_tokens.
    replace (S (0 + length ctx + d)) with (length ctx + S d) by lia.
    replace (0 + length ctx + d) with (length ctx + d) by lia.
    rewrite firstn_app_2, firstn_map, (anc_prefix par n i Hok Hi d Hd).
    reflexivity.
Qed.

(* V2, node by node: if every slot on the root path to i has the ancestor-mask row and the
   position len + depth of a tree node (only those rows matter), then at every layer l slot i
   has the layer-l input of the last token of sequential decoding of ctx ++ path(i), and the
   sequential layer-l cache of ctx ++ path(i) is the committed cache followed by the block's
   entries of the root path to i. *)
Theorem tree_attention_exact_rows : forall {X K} (M : model X K) C ctx tok pos vis par n i,
  tree_ok par n -> i < n -> (forall l, C l = ents M l ctx) ->
  (forall j, In j (anc par i) -> row_ok par vis pos (length ctx) n j) ->
  forall l,
    tx M C tok pos vis n l i = hid M l (ctx ++ path_tokens tok par i)
    /\ ents M l (ctx ++ path_tokens tok par i) = C l ++ map (tkv M C tok pos vis n l) (anc par i).
Proof.
  intros X K M C ctx tok pos vis par n i Hok Hi HC Hrow l.
  assert (Hgood : forall j, In j (anc par i) ->
            j < n /\ forall k, In k (anc par j) -> row_ok par vis pos (length ctx) n k).
  { intros j Hj; split.
    - pose proof (anc_le par n i Hok Hi j Hj); lia.
    - intros k Hk; apply Hrow; exact (anc_sub par n i Hok Hi j Hj k Hk). }
  (* first: the inputs, at every layer, for every such node *)
  assert (Htx : forall l i, i < n ->
            (forall j, In j (anc par i) -> row_ok par vis pos (length ctx) n j) ->
            tx M C tok pos vis n l i = hid M l (ctx ++ path_tokens tok par i)).
  { clear Hgood Hrow Hi i l; intro l; induction l as [|l IH]; intros i Hi Hrow.
    - simpl; unfold path_tokens; destruct (anc_snoc par n i Hok Hi) as [A ->].
      rewrite map_app, app_assoc; simpl; rewrite last_last; reflexivity.
    - rewrite hid_S; simpl.
      assert (Hii : In i (anc par i)).
      { destruct (anc_snoc par n i Hok Hi) as [A ->]; apply in_or_app; right; left; reflexivity. }
      destruct (Hrow i Hii) as [Hvis Hpos].
      rewrite Hvis, IH by auto.
      rewrite (ents_split M C ctx tok pos vis par n l i Hok Hi HC).
      + unfold path_tokens; rewrite app_length, map_length, Hpos; unfold node_depth.
        pose proof (anc_length par n i Hok Hi).
        replace (pred (length ctx + length (anc par i)))
          with (length ctx + pred (length (anc par i))) by lia.
        reflexivity.
      + intros j Hj; apply (Hrow j Hj).
      + intros j Hj; apply IH.
        * pose proof (anc_le par n i Hok Hi j Hj); lia.
        * intros k Hk; apply Hrow; exact (anc_sub par n i Hok Hi j Hj k Hk). }
  split.
  - apply Htx; auto.
  - apply ents_split; auto.
    + intros j Hj; apply (Hrow j Hj).
    + intros j Hj; destruct (Hgood j Hj); apply Htx; auto.
Qed.

(* V2 (a): the block as specjax builds it -- ancestor mask, positions len + depth -- over the
   committed cache of ctx: every slot, every layer. *)
Theorem tree_attention_exact : forall {X K} (M : model X K) C ctx tok par n,
  tree_ok par n -> (forall l, C l = ents M l ctx) ->
  let pos := fun j => length ctx + node_depth par j in
  forall l i, i < n ->
    tx M C tok pos (ancestor_mask par) n l i = hid M l (ctx ++ path_tokens tok par i)
    /\ tkv M C tok pos (ancestor_mask par) n l i
       = (length (ctx ++ path_tokens tok par i) - 1,
          kvf M l (length (ctx ++ path_tokens tok par i) - 1) (hid M l (ctx ++ path_tokens tok par i)))
    /\ ents M l (ctx ++ path_tokens tok par i)
       = C l ++ map (tkv M C tok pos (ancestor_mask par) n l) (anc par i).
Proof.
  intros X K M C ctx tok par n Hok HC pos l i Hi.
  assert (Hrow : forall j, In j (anc par i) -> row_ok par (ancestor_mask par) pos (length ctx) n j).
  { intros j Hj; split; [|reflexivity].
    apply ancestor_mask_row; auto; pose proof (anc_le par n i Hok Hi j Hj); lia. }
  destruct (tree_attention_exact_rows M C ctx tok pos (ancestor_mask par) par n i Hok Hi HC Hrow l)
    as [H1 H2].
  split; [exact H1|split; [|exact H2]].
  unfold tkv; rewrite H1; unfold pos, path_tokens, node_depth.
  rewrite app_length, map_length; pose proof (anc_length par n i Hok Hi).
  replace (length ctx + length (anc par i) - 1) with (length ctx + pred (length (anc par i))) by lia.
  reflexivity.
Qed.

(* ---------- commit ---------- *)

(* models.cache.commit: the pending entries of slots[0..m-1], in order, appended to C. *)
Definition commit {K} (C : cache K) (blk : nat -> nat -> nat * K) (slots : list nat) (m : nat)
  : cache K :=
  fun l => C l ++ map (blk l) (firstn m slots).

(* A root path of the tree: [0], extended by children (what the walk's path_slots hold). *)
Inductive root_path (par : nat -> nat) (n : nat) : list nat -> Prop :=
  | rp_root : root_path par n [0]
  | rp_child : forall p j, root_path par n p -> 0 < j < n -> par j = last p 0 ->
      root_path par n (p ++ [j]).

Lemma root_path_anc : forall par n p, tree_ok par n -> 0 < n -> root_path par n p ->
  last p 0 < n /\ p = anc par (last p 0).
Proof.
  intros par n p Hok Hn Hp; induction Hp as [|p j Hp IH Hj Hpar].
  - simpl; split; [lia|reflexivity].
  - rewrite last_last; split; [lia|].
    rewrite (anc_S par n j Hok Hj), Hpar; f_equal; apply IH; auto.
Qed.

(* V2 (b): committing the accepted slots -- the first m path slots, a root path [0, s_1, ..,
   s_k] -- appends exactly the entries that sequential decoding of ctx ++ (their tokens)
   writes: the new cache is the sequential cache of ctx ++ tok s_0 .. tok s_k at every layer
   (so the hypothesis on C holds again for the next round, with the longer context). *)
Theorem commit_exact : forall {X K} (M : model X K) C ctx tok par n slots m,
  tree_ok par n -> 0 < n -> (forall l, C l = ents M l ctx) ->
  root_path par n (firstn m slots) ->
  let pos := fun j => length ctx + node_depth par j in
  forall l,
    commit C (tkv M C tok pos (ancestor_mask par) n) slots m l
    = ents M l (ctx ++ map tok (firstn m slots)).
Proof.
  intros X K M C ctx tok par n slots m Hok Hn HC Hp pos l.
  destruct (root_path_anc par n _ Hok Hn Hp) as [Hlt Heq].
  unfold commit; rewrite Heq.
  destruct (tree_attention_exact M C ctx tok par n Hok HC l (last (firstn m slots) 0) Hlt)
    as [_ [_ H]].
  unfold path_tokens in H; rewrite H; reflexivity.
Qed.

(* The logits of a stack of L layers are any function head of the layer-L input (the last
   layer's output): at every slot they equal those of sequential decoding of ctx ++ path(i). *)
Corollary tree_logits_exact : forall {X K Y} (M : model X K) (head : X -> Y) C ctx tok par n L i,
  tree_ok par n -> (forall l, C l = ents M l ctx) -> i < n ->
  head (tx M C tok (fun j => length ctx + node_depth par j) (ancestor_mask par) n L i)
  = head (hid M L (ctx ++ path_tokens tok par i)).
Proof.
  intros X K Y M head C ctx tok par n L i Hok HC Hi.
  destruct (tree_attention_exact M C ctx tok par n Hok HC L i Hi) as [H _]; rewrite H; reflexivity.
Qed.
