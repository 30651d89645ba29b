(* LoopLink.v -- a concrete, computable instance of LoopSlots.loop (issue 61, item 1).

   Map to the rows of proofs/README.md:
   - V1 + V2 : toy_loop_lossless  (loop_lossless_slots on the table-driven toy model and the
                                   drafter with memory below: its trees satisfy dtree_ok, so the
                                   stream is the greedy decode of the toy model)
               toy_run            (the program tests/test_coq_loop_link.py evaluates with
                                   `Eval vm_compute` on random tables and prompts and compares,
                                   token for token and round for round, with specjax.generate)

   The toy target (TreeAttention's abstract stack, made concrete; tests/coq_loop_reference.py
   is the same model as a specjax model family). A layer input is (token, position, a):
   - emb t = (t, 0, 0);
   - the KV entry of a token at layer l and position p with input (t, _, a) is
     ((p + 1) * ((l + 1) * t + a)) mod 7 (position-dependent, as RoPE keys are);
   - layer l's output for a query at position p with input (t, _, _) that sees the entries E
     is (t, p, (sum of the entries' values) mod 7): it depends on every visible entry, so a
     mask that hides an ancestor, or a cache that holds one entry too many, changes it;
   - head (t, p, a) = tbl[t][p mod 3][a], a table of tokens (exact argmax: no floats).

   The drafter (a state machine, as LoopSlots.drafter asks). State: a round counter and a
   bigram memory mem (the token that last followed each token in the committed text; at the
   start the prompt's pairs over the default mem v = (v + 1) mod V). Its tree for the text
   x ++ [root], N = D + 3 nodes:
   - nodes 0..D-1: a chain c_1..c_D, c_j the greedy rollout of the text, except at depth
     k = counter mod (D + 2) + 1 (when k <= D), where c_k = (y_k + 1) mod V;
   - node D: mem root below the root (a duplicate sibling of node 0 when mem is right);
   - node D + 1: invalid (token 0);
   - node D + 2: mem c_1 below node 0 (a duplicate of node 1, or the branch the walk takes
     when node 1 is the corrupted one).
   observe: counter + 1 and mem updated with the round's pairs (root, e_1), (e_1, e_2), ...
   of the emitted tokens e (read back from the path slots and the target's layer-L output
   at the last path slot). *)

From Coq Require Import List Arith Lia Bool.
From Specjax Require Import GreedyWalk TreeAttention LoopSlots.
Import ListNotations.

Definition MODA := 7.
Definition MODP := 3.

(* tbl[t][p mod 3][a]: the toy target's next token. *)
Definition lookup (tbl : list (list (list nat))) (t p a : nat) : nat :=
  nth a (nth (p mod MODP) (nth t tbl []) []) 0.

Definition toy_x : Type := (nat * nat * nat)%type.

Definition toy_model : model toy_x nat :=
  mk_model toy_x nat
    (fun t => (t, 0, 0))
    (fun l p x => let '(t, _, a) := x in (S p * (S l * t + a)) mod MODA)
    (fun _ p x E => let '(t, _, _) := x in (t, p, fold_right plus 0 (map snd E) mod MODA)).

Definition toy_head (tbl : list (list (list nat))) (x : toy_x) : nat :=
  let '(t, p, a) := x in lookup tbl t p a.

(* The toy target's greedy token after c (L layers). *)
Definition toy_g (tbl : list (list (list nat))) (L : nat) (c : list nat) : nat :=
  toy_head tbl (hid toy_model L c).

(* ---------- the drafter with memory ---------- *)

Record toy_state := mk_toy_state { counter : nat; mem : nat -> nat }.

Definition upd (m : nat -> nat) (a b : nat) : nat -> nat := fun x => if Nat.eqb x a then b else m x.

(* mem updated with the consecutive pairs of s, in order (a later pair wins). *)
Fixpoint learn (m : nat -> nat) (s : list nat) : nat -> nat :=
  match s with
  | a :: (b :: _) as rest => learn (upd m a b) rest
  | _ => m
  end.

Definition toy_init (V : nat) (prompt : list nat) : toy_state :=
  mk_toy_state (length prompt) (learn (fun v => S v mod V) prompt).

Definition toy_tree (V D : nat) (st : toy_state) (root : nat) (y : list nat) : dtree :=
  let k := S (counter st mod (D + 2)) in
  let c := fun j => if Nat.eqb j k then S (nth (pred j) y 0) mod V else nth (pred j) y 0 in
  mk_dtree (D + 3)
    (fun i => if i <? D then i else if Nat.eqb i (D + 2) then 1 else 0)
    (fun i => if i <? D then c (S i)
              else if Nat.eqb i D then mem st root
              else if Nat.eqb i (S D) then 0 else mem st (c 1))
    (fun i => negb (Nat.eqb i (S D))).

Definition toy_drafter (tbl : list (list (list nat))) (V D L : nat) : drafter toy_state toy_x :=
  mk_drafter toy_state toy_x
    (fun st txt => toy_tree V D st (last txt 0) (greedy (toy_g tbl L) txt D))
    (fun st txt T ps out =>
       let root := last txt 0 in
       let P := 0 :: filter (fun s => negb (Nat.eqb s 0)) (tl ps) in
       let e := map (slot_tok T root) (tl P) ++ [toy_head tbl (out L (last P 0))] in
       mk_toy_state (S (counter st)) (learn (mem st) (root :: e))).

Lemma toy_tree_ok : forall V D st root y, dtree_ok (toy_tree V D st root y).
Proof.
  intros V D st root y i Hi. unfold toy_tree; simpl in *.
  destruct (i <? D); [lia|]. destruct (Nat.eqb_spec i (D + 2)); lia.
Qed.

(* The stream of the computed run: the first token (the prefill's greedy token), then R rounds
   of the loop from the sequential cache of the prompt. *)
Definition toy_run (tbl : list (list (list nat))) (V D L : nat) (prompt : list nat) (R : nat) : list nat :=
  let root := toy_g tbl L prompt in
  root :: loop toy_model (toy_head tbl) L (toy_drafter tbl V D L) D (toy_init V prompt)
               (fun l => ents toy_model l prompt) prompt root R.

(* The tokens emitted after r rounds, r = 0..R: the round boundaries of the run. *)
Definition toy_counts (tbl : list (list (list nat))) (V D L : nat) (prompt : list nat) (R : nat) : list nat :=
  map (fun r => length (toy_run tbl V D L prompt r)) (seq 0 (S R)).

(* What the computed run is proved to be: the greedy decode of the toy model, 1 to D + 1
   tokens per round, whatever the table, the prompt and the number of rounds. *)
Theorem toy_loop_lossless : forall tbl V D L prompt R,
  let out := toy_run tbl V D L prompt R in
  out = greedy (toy_g tbl L) prompt (length out) /\ S R <= length out <= S (R * S D).
Proof.
  intros tbl V D L prompt R out.
  destruct (loop_lossless_slots toy_model (toy_head tbl) L (toy_drafter tbl V D L) D
              (fun st txt => toy_tree_ok V D st (last txt 0) (greedy (toy_g tbl L) txt D))
              R (toy_init V prompt) (fun l => ents toy_model l prompt) prompt (toy_g tbl L prompt)
              (fun l => eq_refl)) as [H1 H2].
  unfold out, toy_run. cbv zeta. simpl length.
  split; [|lia].
  fold (toy_g tbl L) in H1. rewrite H1 at 1. simpl. reflexivity.
Qed.
