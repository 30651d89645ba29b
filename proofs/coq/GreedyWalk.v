(* GreedyWalk.v -- greedy tree-walk losslessness (V1) and progress (V5).

   Map to the rows of proofs/README.md:
   - V1  : greedy_walk_lossless      (one round: the walk emits exactly the greedy rollout)
           walk_accepts_longest_greedy_prefix (the accepted path is the longest prefix of the
                                       greedy rollout that is a root path of the tree)
           decode_lossless           (any number of rounds, trees chosen by an arbitrary drafter)
   - V5  : greedy_walk_progress      (one round emits >= 1 and <= D+1 tokens, and <= depth T + 1)
           decode_progress           (R rounds emit between R and R*(D+1) tokens)

   Model (see proofs/greedy_tree_walk.md section 1 and proofs/README.md, "Machine-checked (Coq)"):
   - tokens are nat; a tree T is a finite list of root paths (list (list nat)); the root is the
     empty path [] and need not be listed; duplicates are allowed (duplicate siblings);
   - the target is abstract: g : list nat -> nat gives the greedy (argmax) token after a
     sequence; exact tree attention (E) is assumed by construction: the token at the slot of
     path u is g (ctx ++ u);
   - the walk has a depth limit D (max_depth): from the root, repeatedly accept the child
     whose token is the target token at the current node, if that child is in T, at most D
     times; then emit the accepted path and the bonus token.
   Prefix-closure of T is not needed for V1/V5 (the walk only ever looks up children of
   nodes it has reached), so the theorems hold for every finite list of paths. *)

From Coq Require Import List Arith Lia.
Import ListNotations.

Definition path := list nat.
Definition tree := list path.

Definition path_eq_dec := list_eq_dec Nat.eq_dec.

(* Plain greedy decoding: the first n tokens after ctx. *)
Fixpoint greedy (g : list nat -> nat) (ctx : list nat) (n : nat) : list nat :=
  match n with
  | O => []
  | S n' => g ctx :: greedy g (ctx ++ [g ctx]) n'
  end.

(* The accepted path of the walk, started at node p (a root path), with at most fuel steps. *)
Fixpoint accept (g : list nat -> nat) (T : tree) (ctx p : path) (fuel : nat) : list nat :=
  match fuel with
  | O => []
  | S f =>
      let t := g (ctx ++ p) in
      if in_dec path_eq_dec (p ++ [t]) T then t :: accept g T ctx (p ++ [t]) f else []
  end.

(* One round: accepted path + bonus (the target token at the last accepted node). *)
Definition walk (g : list nat -> nat) (T : tree) (ctx : list nat) (D : nat) : list nat :=
  let a := accept g T ctx [] D in a ++ [g (ctx ++ a)].

(* Depth of a tree: the longest listed path. *)
Definition depth (T : tree) : nat := fold_right (fun u m => Nat.max (length u) m) 0 T.

(* ---------- greedy rollout facts ---------- *)

Lemma greedy_length : forall g n ctx, length (greedy g ctx n) = n.
Proof. induction n; intros; simpl; auto. Qed.

Lemma greedy_add : forall g a b ctx,
  greedy g ctx (a + b) = greedy g ctx a ++ greedy g (ctx ++ greedy g ctx a) b.
Proof.
  induction a; intros b ctx; simpl.
  - rewrite app_nil_r. reflexivity.
  - rewrite IHa. rewrite <- app_assoc. reflexivity.
Qed.

Lemma greedy_snoc : forall g n ctx,
  greedy g ctx (S n) = greedy g ctx n ++ [g (ctx ++ greedy g ctx n)].
Proof.
  intros. replace (S n) with (n + 1) by lia. rewrite greedy_add. reflexivity.
Qed.

Lemma greedy_prefix : forall g ctx m n, m <= n ->
  greedy g ctx n = greedy g ctx m ++ greedy g (ctx ++ greedy g ctx m) (n - m).
Proof.
  intros. rewrite <- greedy_add. f_equal. lia.
Qed.

(* ---------- the walk ---------- *)

Lemma accept_length_fuel : forall g T ctx fuel p, length (accept g T ctx p fuel) <= fuel.
Proof.
  induction fuel; intros; simpl; [lia|].
  destruct (in_dec _ _ _); simpl; [|lia]. specialize (IHfuel (p ++ [g (ctx ++ p)])). lia.
Qed.

(* Invariant of the walk: if the current node is the greedy rollout of length m, the
   accepted tokens continue it. *)
Lemma accept_greedy : forall g T ctx fuel p m,
  p = greedy g ctx m ->
  p ++ accept g T ctx p fuel = greedy g ctx (m + length (accept g T ctx p fuel)).
Proof.
  induction fuel; intros p m Hp; simpl.
  - rewrite app_nil_r, Nat.add_0_r. auto.
  - destruct (in_dec _ _ _) as [Hin | Hout]; simpl.
    + assert (Hp' : p ++ [g (ctx ++ p)] = greedy g ctx (S m))
        by (rewrite greedy_snoc; subst; reflexivity).
      specialize (IHfuel _ _ Hp').
      replace (p ++ g (ctx ++ p) :: accept g T ctx (p ++ [g (ctx ++ p)]) fuel)
        with ((p ++ [g (ctx ++ p)]) ++ accept g T ctx (p ++ [g (ctx ++ p)]) fuel)
        by (rewrite <- app_assoc; reflexivity).
      rewrite IHfuel. f_equal. lia.
    + rewrite app_nil_r, Nat.add_0_r. auto.
Qed.

Lemma accept_is_greedy : forall g T ctx D,
  accept g T ctx [] D = greedy g ctx (length (accept g T ctx [] D)).
Proof.
  intros. pose proof (accept_greedy g T ctx D [] 0 eq_refl) as H. simpl in H. exact H.
Qed.

(* Every accepted node is a listed path: p ++ accept ... is in T unless nothing was accepted. *)
Lemma accept_in_tree : forall g T ctx fuel p,
  accept g T ctx p fuel = [] \/ In (p ++ accept g T ctx p fuel) T.
Proof.
  induction fuel; intros; simpl; auto.
  destruct (in_dec _ _ _) as [Hin | Hout]; auto. right.
  destruct (IHfuel (p ++ [g (ctx ++ p)])) as [E | I].
  - rewrite E. exact Hin.
  - rewrite <- app_assoc in I. exact I.
Qed.

Lemma depth_ge : forall T u, In u T -> length u <= depth T.
Proof.
  induction T; simpl; intros u H; [contradiction|].
  destruct H as [<- | H]; [lia|]. specialize (IHT u H). lia.
Qed.

Lemma accept_length_depth : forall g T ctx D, length (accept g T ctx [] D) <= depth T.
Proof.
  intros. destruct (accept_in_tree g T ctx D []) as [E | I].
  - rewrite E. simpl. lia.
  - apply depth_ge in I. simpl in I. exact I.
Qed.

(* V1: one round of the walk emits exactly the greedy rollout, token for token. *)
Theorem greedy_walk_lossless : forall g T ctx D,
  walk g T ctx D = greedy g ctx (length (walk g T ctx D)).
Proof.
  intros. unfold walk. rewrite app_length. simpl.
  rewrite Nat.add_1_r, greedy_snoc, <- accept_is_greedy. reflexivity.
Qed.

(* V5: one round emits at least one token (the bonus) and at most D + 1, and at most
   depth T + 1. *)
Theorem greedy_walk_progress : forall g T ctx D,
  1 <= length (walk g T ctx D) <= S (Nat.min D (depth T)).
Proof.
  intros. unfold walk. rewrite app_length. simpl.
  pose proof (accept_length_fuel g T ctx D []). pose proof (accept_length_depth g T ctx D). lia.
Qed.

(* V1, the characterisation used by Graft G1: the walk accepts k tokens where k is maximal
   (up to the limit D) such that every greedy prefix of length 1..k is a root path of T. *)
Theorem walk_accepts_longest_greedy_prefix : forall g T ctx D,
  let k := length (accept g T ctx [] D) in
  k <= D /\
  (forall j, 1 <= j <= k -> In (greedy g ctx j) T) /\
  (k = D \/ ~ In (greedy g ctx (S k)) T).
Proof.
  intros g T ctx D.
  (* general invariant, from node p = greedy m *)
  assert (Gen : forall fuel p m, p = greedy g ctx m ->
            let k := length (accept g T ctx p fuel) in
            k <= fuel /\
            (forall j, 1 <= j <= k -> In (greedy g ctx (m + j)) T) /\
            (k = fuel \/ ~ In (greedy g ctx (S (m + k))) T)).
  { induction fuel; intros p m Hp; simpl.
    - split; [lia|]. split; [intros; lia|]. left; reflexivity.
    - destruct (in_dec _ _ _) as [Hin | Hout]; simpl.
      + assert (Hp' : p ++ [g (ctx ++ p)] = greedy g ctx (S m))
          by (rewrite greedy_snoc; subst; reflexivity).
        destruct (IHfuel _ _ Hp') as (H1 & H2 & H3).
        split; [lia|]. split.
        * intros j Hj. destruct (Nat.eq_dec j 1) as [-> | Hj1].
          -- rewrite Nat.add_1_r, <- Hp'. exact Hin.
          -- replace (m + j) with (S m + (j - 1)) by lia. apply H2. lia.
        * destruct H3 as [H3 | H3]; [left; lia | right].
          intro Hc. apply H3.
          replace (S (S m + length (accept g T ctx (p ++ [g (ctx ++ p)]) fuel)))
            with (S (m + S (length (accept g T ctx (p ++ [g (ctx ++ p)]) fuel)))) by lia.
          exact Hc.
      + split; [lia|]. split; [intros; lia|]. right.
        intro Hc. apply Hout. rewrite Hp, <- greedy_snoc.
        replace (S m) with (S (m + 0)) by lia. exact Hc. }
  destruct (Gen D [] 0 eq_refl) as (H1 & H2 & H3). simpl in *.
  split; [exact H1|]. split; [exact H2|]. exact H3.
Qed.

(* ---------- several rounds ---------- *)

(* R rounds of the loop; the drafter may propose any tree, as a function of the committed
   sequence (ctx includes the prompt and everything emitted so far). *)
Fixpoint decode (g : list nat -> nat) (draft : list nat -> tree) (D : nat)
    (ctx : list nat) (R : nat) : list nat :=
  match R with
  | O => []
  | S r => let e := walk g (draft ctx) ctx D in e ++ decode g draft D (ctx ++ e) r
  end.

(* V1 for the whole loop: after any number of rounds the emitted stream is the greedy
   rollout, whatever trees the drafter proposed. *)
Theorem decode_lossless : forall g draft D R ctx,
  decode g draft D ctx R = greedy g ctx (length (decode g draft D ctx R)).
Proof.
  induction R; intros ctx; simpl; auto.
  set (e := walk g (draft ctx) ctx D).
  assert (He : e = greedy g ctx (length e)) by apply greedy_walk_lossless.
  rewrite app_length, greedy_add, <- He.
  rewrite (IHR (ctx ++ e)) at 1. reflexivity.
Qed.

(* V5 for the whole loop. *)
Theorem decode_progress : forall g draft D R ctx,
  R <= length (decode g draft D ctx R) <= R * S D.
Proof.
  induction R; intros ctx; simpl; [lia|].
  rewrite app_length.
  pose proof (greedy_walk_progress g (draft ctx) ctx D).
  specialize (IHR (ctx ++ walk g (draft ctx) ctx D)). lia.
Qed.

(* A list fact used by the selection (DDTreeSelect.v) and the sampling loop (SlotStream.v): map by a
   function injective on the list keeps it duplicate-free. *)
Lemma NoDup_map_inj_gen : forall A B (f : A -> B) l,
  (forall x y, In x l -> In y l -> f x = f y -> x = y) -> NoDup l -> NoDup (map f l).
Proof.
  intros A B f l Hinj ND. induction ND as [|x l Hx ND IH]; simpl; constructor.
  - intro H. apply in_map_iff in H. destruct H as (y & E & Hy).
    assert (y = x) by (apply Hinj; simpl; auto). subst. contradiction.
  - apply IH. intros; apply Hinj; simpl; auto.
Qed.
