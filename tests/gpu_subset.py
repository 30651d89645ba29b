"""The `gpu` subset of the suite (`make test-gpu`): what an accelerator must show, in <= 5 minutes on one
H100 including compiles. tests/conftest.py marks every test whose node id starts with an entry.

Each entry is there for one claim on the backend the design card names:
"""

GPU_SUBSET = {
    # the suite's own XLA flags reach only a CPU backend that knows them (the GPU abort at backend start)
    "tests/test_xla_flags.py": "the suite starts on any backend",
    # greedy losslessness of every registered method, float32 at highest precision, under the caller's jit
    "tests/test_conformance.py::test_registered_method_conforms": "every registered method equals AR (float32)",
    # bfloat16 generations of every drafter family, each row identical to AR or parting at a classified near-tie
    "tests/test_equality.py::test_reduced_precision_divergences_are_all_classified": "bfloat16, near-ties classified",
    "tests/test_equality.py::test_near_tie_threshold_per_dtype": "the near-tie threshold per dtype",
    # the three DDTree tests that failed on an H200 (trained weights; P6 per round and over a prompt set)
    "tests/test_ddtree.py::test_ddtree_greedy_lossless_trained_weights": "DDTree lossless on trained weights",
    "tests/test_ddtree.py::test_trees_nested_and_acceptance_monotone_in_budget_per_round": "P6 per round",
    "tests/test_ddtree.py::test_tau_non_decreasing_in_budget_on_a_prompt_set": "P6 over a prompt set",
    # the sampling law of the tree walks through the whole loop (exact target law, G-test)
    "tests/test_decode_sampling.py::test_speculative_sampling_matches_exact_target_law": "sampled walks' law",
    # the mesh paths on the one device, and a bfloat16 training step with online target features
    "tests/test_gpu.py": "mesh on one device; bfloat16 online-feature training step",
    "tests/test_train_run.py::test_features_computed_in_the_step_give_the_cached_loss": "online target features",
    "tests/test_train_run.py::test_a_bfloat16_target_forward_stays_within_its_rounding_bound": "bfloat16 target",
}
