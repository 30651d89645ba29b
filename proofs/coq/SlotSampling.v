(* SlotSampling.v -- the slot walk with samples is SamplingWalk's walk (V3, issue 50).

   Map to the rows of proofs/README.md:
   - V3  : sampling_walk_is_accept   (SamplingWalk.walk is GreedyWalk's accepted path + bonus
                                      with the rule "the sample at the current node")
           slot_sampling_walk_eq     (specjax's walk over slots, fed the sample of each slot's
                                      path as its target token, emits exactly SamplingWalk.walk
                                      on paths(parents, tokens, valid), when valid nodes hang
                                      below the root or valid nodes and valid siblings carry
                                      distinct tokens)

   Model: LoopSlots.v's slot walk and SamplingWalk.v's assignment a of one sample per path
   (look a u = the sample at the node of path u). Under the two hypotheses distinct valid slots
   have distinct paths (LoopSlots.spath_injective), so "one independent sample per slot" (the
   code) and "one per path" (SamplingWalk.v) are the same thing; the theorem is pointwise, for
   every assignment. The probability statements of SamplingWalk.v / StreamHist.v are about
   SamplingWalk.walk; composing them with this identity into a slot-level stream law is not
   written out. *)

From Coq Require Import List Arith Lia.
From Specjax Require Import GreedyWalk TreeAttention LoopSlots SamplingWalk.
Import ListNotations.

Lemma sampling_walk_is_accept : forall T a fuel u,
  SamplingWalk.walk T a fuel u
  = GreedyWalk.accept (look a) T [] u fuel ++ [look a (u ++ GreedyWalk.accept (look a) T [] u fuel)].
Proof.
  intros T a fuel. induction fuel as [|f IH]; intros u; simpl.
  - rewrite app_nil_r. reflexivity.
  - destruct (in_dec path_eq_dec (u ++ [look a u]) T) as [Hin | Hout]; simpl.
    + rewrite IH, <- app_assoc. reflexivity.
    + rewrite app_nil_r. reflexivity.
Qed.

Theorem slot_sampling_walk_eq : forall par tok valid ns a D,
  tree_ok par ns -> 0 < ns -> valid_closed par valid ns -> distinct_siblings par tok valid ns ->
  let tg := fun s => look a (spath tok par s) in
  emitted tok tg (slot_walk par tok valid ns tg D 0) = SamplingWalk.walk (paths par tok valid ns) a D [].
Proof.
  intros par tok valid ns a D Hok Hn Hcl Hds tg.
  rewrite (slot_walk_eq_path_walk par tok valid ns tg [] (look a) D Hok Hn Hcl Hds)
    by (intros s _; reflexivity).
  rewrite sampling_walk_is_accept. reflexivity.
Qed.
