"""Mutation testing of the core: how many small bugs in each module its tests would let through.

Every number tts prints passes through a few modules (answer keys, grading, estimators and the
interval, votes and selection, verifier aggregation, the cost model, the online budget, the
server's request policy). For each, mutmut plants one small bug at a time (an operator, a
constant, a comparison, a dropped argument) and runs only the tests that call the mutated
function; a mutant that no test notices "survives". A survivor is either a missing test or an
equivalent mutant (one that changes nothing a user can observe): those are listed, each with the
reason, in ``benchmarks/mutation_equivalent.toml`` and counted apart. The goal is under 10%
unexplained survivors per module.

Why mutmut (3.x) and not cosmic-ray: mutmut forks an already-warm pytest process per mutant and
runs only the tests whose stack reaches the mutated function (measured once, up front), where
cosmic-ray starts a fresh test command per mutant; on 2 shared cores that is the difference
between minutes and hours per module. It is maintained, installs from PyPI on Python 3.11, and
never edits the checkout: each module is measured in a scratch copy under ``.mutation/``.

Slow (minutes to an hour per module), so never in CI. Run one module at a time, niced::

    pip install mutmut
    python benchmarks/mutation.py                      # every module in MODULES
    python benchmarks/mutation.py answers/equivalence  # some of them (names as in MODULES)
    python benchmarks/mutation.py --list               # the modules and their tests
    python benchmarks/mutation.py --table              # the table of the last runs, no new run
    python benchmarks/mutation.py --diff [BASE]        # review a change: only what it touched
    python benchmarks/mutation.py --stale              # the table's rows older than their module's code

``--diff`` (for every change, before it is merged) mutates only the functions the change since
BASE touched (BASE's merge base with HEAD to the working tree; BASE defaults to origin/main, else
main), and of those only the mutants on changed lines (``--whole``: all of the functions'), runs
the tests MODULES lists for their modules (else the tests that import them) and prints the
survivors with their diffs; it exits 1 while one is left. The diff-to-functions mapping is in
``benchmarks/mutation_diff.py``.

Prints one row per module (mutants, killed, survived, equivalent, survival %) and the diff of
every unexplained survivor; ``.mutation/results.json`` keeps the last result of each module.

``--stale`` lists the modules whose row in docs/mutation.md was last written before a commit that
changed the module's source: such a row describes code that is gone (its mutant names may even
point at other mutants now, so listed equivalents stop matching). It prints the module names, one
per line, ready to pass back to this script, with the newest change after the row.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutation"
EQUIVALENT = Path(__file__).with_name("mutation_equivalent.toml")
TABLE_DOC = Path("docs") / "mutation.md"

# Module (under tts/) -> the narrowest tests that cover it. mutmut then runs, per mutant, only
# those of these tests that call the mutated function.
PRM_PARITY = [f"tests/parity/test_prm_and_aggregation.py::test_{name}" for name in (
    "qwen25_math_prm_reads_the_references_bytes", "math_shepherd_reads_the_references_bytes",
    "the_model_cards_math_shepherd_layout_stays_a_setting")]
MODULES: dict[str, list[str]] = {
    "answers/equivalence": ["tests/answers/test_key_comparisons.py", "tests/answers/test_answers.py",
                            "tests/answers/test_key_properties.py",
                            "tests/search/test_vote_properties.py"],
    "answers/extraction": ["tests/answers/test_extraction.py", "tests/answers/test_answers.py",
                           "tests/answers/test_forms.py"],
    "answers/exact": ["tests/answers/test_exact.py", "tests/answers/test_answers.py", "tests/benchmarks/test_chains.py"],
    "answers/forms": ["tests/answers/test_forms.py", "tests/answers/test_answers.py"],
    "answers/free_text": ["tests/answers/test_free_text.py", "tests/parity/test_free_text.py"],
    "answers/kinds": ["tests/answers/test_kinds.py", "tests/search/sampling/test_tool_vote.py",
                      "tests/answers/test_free_text.py"],
    # Forked workers and checks of milliseconds (test_grading.py's spawned workers and math-verify
    # take seconds per test: 386 mutants did not fit in 10 minutes).
    "benchmarks/grading": ["tests/benchmarks/test_grading_paths.py"] + [
        # the notes a row records (why a check gave no verdict, its seconds): under 3 s each
        f"tests/benchmarks/test_grading.py::test_{name}" for name in (
            "each_check_is_timed_and_a_verdict_needs_no_reason", "a_check_that_raises_is_ungraded_with_the_exception_as_its_reason",
            "a_problem_without_a_gold_answer_has_its_checks_noted_against_the_empty_gold",
            "a_check_that_hangs_is_ungraded_its_worker_killed_and_the_others_graded",
            "b_check_that_kills_its_worker_is_retried_once_then_ungraded")],
    "eval/estimators": ["tests/eval/test_estimators.py", "tests/parity/test_estimators_and_cost.py"],
    "eval/report": ["tests/eval/test_report.py"],
    "search/base": ["tests/search/test_base_requests.py", "tests/search/test_select_text.py", "tests/search/test_samples.py",
                    "tests/search/test_strategies.py", "tests/search/test_vote_properties.py",
                    "tests/search/sampling/test_aggregation.py", "tests/search/sampling/test_tool_vote.py",
                    "tests/answers/test_free_text.py", "tests/search/sequential/test_revision.py",
                    "tests/parity/test_voting_and_answers.py",
                    # the per-request stop, logprobs refusals, how each strategy spends a budget, tools
                    "tests/search/test_request_stop.py", "tests/search/test_logprobs_refusal.py",
                    "tests/session/test_budget_use.py", "tests/test_where_to_add.py", "tests/session/test_inputs.py",
                    "tests/serve/test_planning.py", "tests/serve/test_agent_strategies.py"],
    # The per-request stops (stop_judge, settled_scores) are tests/search/test_request_stop.py's.
    "search/sampling/best_of_n": ["tests/search/sampling/test_aggregation.py", "tests/search/test_strategies.py",
                                  "tests/parity/test_prm_and_aggregation.py", "tests/search/test_request_stop.py"],
    "search/sampling/self_consistency": ["tests/search/sampling/test_aggregation.py",
                                         "tests/search/test_strategies.py", "tests/search/test_request_stop.py"],
    "search/sampling/weighted_vote": ["tests/search/sampling/test_aggregation.py", "tests/search/test_strategies.py",
                                      "tests/parity/test_prm_and_aggregation.py", "tests/search/test_request_stop.py"],
    "verifiers/base": ["tests/verifiers/test_base.py", "tests/parity/test_prm_and_aggregation.py",
                       "tests/verifiers/test_chain_check.py",
                       # build_verifier names the verifier's span by its kind (about 1 s).
                       "tests/test_tracing.py::test_a_beam_search_is_one_solve_span_over_its_engine_and_verifier_calls"],
    "cost/cost_model": ["tests/cost/test_cost_model.py", "tests/cost/test_cost_reference.py", "tests/parity/test_estimators_and_cost.py",
                        "tests/parity/test_kinetics_sparse.py",
                        "tests/cost/test_deployment.py"],  # tensor parallelism, quantized weights, speculation
    "budgets/online": ["tests/budgets/test_online_rule.py", "tests/budgets/test_online.py", "tests/budgets/replay",
                       "tests/budgets/test_horizon_rule.py", "tests/budgets/test_window_and_length_rules.py",
                       "tests/budgets/test_dirichlet_rule.py", "tests/budgets/test_plan_round_settings.py"],
    # The rules of one vote (moved out of budgets/online, which runs them over many problems), and a
    # request's own stop (issue 50).
    "search/stopping": ["tests/search/test_request_stop.py", "tests/budgets/test_online_rule.py",
                        "tests/budgets/test_horizon_rule.py", "tests/budgets/test_window_and_length_rules.py",
                        "tests/budgets/test_dirichlet_rule.py", "tests/budgets/test_plan_round_settings.py",
                        # the stream span of each wave (about 3 s)
                        "tests/test_tracing.py::test_a_vote_records_its_shares_and_the_per_request_stop"],
    # The policy called directly; test_security.py (the same rules through the HTTP server, 18 s a
    # run) made each mutant too slow for the module to finish (194 not run in 20 minutes).
    "serve/policy": ["tests/serve/test_policy_values.py", "tests/serve/test_policy_rules.py"],
    # Issue 48: every other module that computes something a user reads (docs/mutation.md says
    # which have been run). The strategies: their own tests, then the parity tests against the papers.
    "search/sampling/certainty_probe": ["tests/search/sampling/test_certainty_probe.py",
                                        "tests/search/sampling/test_certainty_probe_requests.py",
                                        "tests/parity/test_sequential.py"],
    "search/sampling/codet": ["tests/search/test_codet.py", "tests/search/test_codet_rules.py", "tests/parity/test_codet.py"],
    # Its rules on hand-made traces (test_deepconf_rules.py), then the scripted runs but the three of
    # 40 problems that took 10 to 22 s each (the module ran 15 mutants a minute with them).
    "search/sampling/deepconf": ["tests/search/sampling/test_deepconf_rules.py"] + [
        f"tests/search/sampling/test_deepconf.py::test_{name}" for name in (
            "token_confidence_is_minus_the_mean_top_k_logprob_and_groups_slide",
            "the_in_engine_stop_shortens_exactly_the_stopped_samples",
            "the_threshold_is_the_warm_up_quantile_and_a_backend_without_the_stop_pays_every_token",
            "consensus_stops_sampling_a_problem_early", "missing_top_logprobs_is_refused_naming_the_unavailable_scorers",
            "warmup_above_n_is_refused_and_the_default_is_capped_at_n")] + [
        f"tests/parity/test_deepconf.py::test_{name}" for name in (
            "online_final_traces_shorter_than_the_window_are_dropped_below_the_bar",
            "the_warm_up_bar_is_the_reference_percentile", "consensus_share_counts_answered_traces_only",
            "adaptive_sampling_stops_where_the_papers_beta_reaches_tau",
            "online_settings_follow_the_reference_defaults_and_keep_the_old_rule_reachable",
            "trace_confidence_measures_equal_the_reference", "bottom_ten_percent_takes_the_floor_of_the_group_count",
            "offline_filter_and_weighted_vote_equal_the_reference", "offline_top_share_keeps_the_old_count_rule")],
    "search/sampling/execution_vote": ["tests/search/test_execution_vote.py", "tests/search/test_execution_vote_rules.py",
                                       "tests/search/test_request_stop.py", "tests/parity/test_execution_votes.py"],
    "search/sampling/program_vote": ["tests/search/test_program_vote.py", "tests/search/test_program_vote_printed.py",
                                     "tests/search/test_request_stop.py", "tests/search/test_program_vote_rules.py",
                                     "tests/parity/test_program_of_thoughts.py"],
    "search/sampling/tool_vote": ["tests/search/sampling/test_tool_vote.py", "tests/search/sampling/test_tool_vote_rules.py",
                                  "tests/search/sampling/test_repeated_calls.py", "tests/search/test_request_stop.py",
                                  "tests/parity/test_voting_and_answers.py",
                    # the per-request stop, logprobs refusals, how each strategy spends a budget, tools
                    "tests/search/test_request_stop.py", "tests/search/test_logprobs_refusal.py",
                    "tests/session/test_budget_use.py", "tests/test_where_to_add.py", "tests/session/test_inputs.py",
                    "tests/serve/test_planning.py", "tests/serve/test_agent_strategies.py"],
    "search/sampling/usc": ["tests/search/sampling/test_usc.py", "tests/search/sampling/test_usc_requests.py",
                            "tests/parity/test_free_text.py"],
    "search/sequential/budget_forcing": ["tests/search/sequential/test_budget_forcing.py",
                                         "tests/search/sequential/test_budget_forcing_engine.py",
                                         "tests/search/sequential/test_budget_forcing_rules.py", "tests/parity/test_sequential.py"],
    "search/sequential/execution_feedback": ["tests/search/sequential/test_execution_feedback.py",
                                             "tests/search/sequential/test_self_debugging.py",
                                             "tests/parity/test_self_debugging.py"],
    "search/sequential/generative_verification": ["tests/search/sequential/test_generative_verification.py",
                                                  "tests/search/sequential/test_generative_verification_rules.py",
                                                  "tests/parity/test_judge_and_genrm.py"],
    "search/sequential/revision": ["tests/search/sequential/test_revision.py", "tests/search/sequential/test_revision_rules.py",
                                   "tests/search/sequential/test_self_debugging.py",
                                   "tests/parity/test_sequential.py", "tests/parity/test_self_debugging.py"],
    "search/sequential/tool_integrated": ["tests/search/sequential/test_tool_integrated.py",
                                          "tests/search/sequential/test_tool_integrated_rules.py",
                                          "tests/parity/test_tool_integrated_reasoning.py"],
    # Its tests without the two `tts eval` runs (11 s of every surviving mutant's: 141 of 716 run in 14
    # minutes); the model entries' backend configs and the engine pool are tested directly instead.
    "search/tree/ab_mcts": [f"tests/search/tree/test_ab_mcts.py::test_{name}" for name in (
        "it_deepens_when_refinements_score_higher_and_widens_when_fresh_samples_do",
        "with_equal_evidence_it_does_both",
        "each_round_is_one_expand_call_for_all_problems_and_n_is_the_answer_count",
        "bad_arguments_are_refused",
        "the_trace_records_every_widen_and_deepen_choice_and_refinements_read_their_parent",
        "the_multi_model_variant_prefers_the_model_whose_answers_score_higher",
        "config_and_budgets_say_what_to_change",
        "a_verifier_that_raises_does_not_end_the_run",
        "a_model_entry_is_the_runs_backend_with_that_model_or_its_own_settings",
        "a_labels_model_entry_shows_its_settings_but_not_its_name_or_model_twice",
        "a_given_generator_that_is_the_runs_own_is_priced_as_the_run",
        "the_answer_of_each_select_and_the_trace_of_the_tree",
        "without_an_answer_the_verifier_select_answers_nothing_and_chooses_no_node",
        "every_request_carries_the_runs_sampling_and_a_seed_of_its_own_problem_model_and_place",
        "the_thompson_draws_are_seeded_by_the_run_and_the_prior_is_the_configs",
        "a_model_entry_opens_its_own_backend_for_each_batch_of_problems_and_is_priced_on_it",
        "an_entry_equal_to_the_runs_backend_is_the_run_and_a_generator_without_a_name_goes_by_its_entry",
        "the_search_refuses_bad_settings_exactly_and_its_default_generators_repeat",
        "budgets_are_refused_below_the_worst_case_only_and_an_entry_without_a_name_goes_by_its_kind",
        "draws_use_the_priors_a_and_b_each_in_its_place_and_a_tie_goes_to_gen",
        "a_strategy_without_a_seed_is_seeded_0_and_a_failing_verifier_is_logged_per_round",
        "the_search_gets_the_configs_prior_a_model_that_loses_results_is_refused_and_a_step_verifier_gets_steps")] + ["tests/parity/test_ab_mcts.py"],
    "search/tree/beam": ["tests/search/tree/test_beam.py", "tests/parity/test_tree_searches.py"],
    "search/tree/dvts": ["tests/search/tree/test_dvts.py", "tests/parity/test_tree_searches.py"],
    "search/tree/ets": ["tests/search/tree/test_ets.py", "tests/search/tree/test_ets_parts.py", "tests/parity/test_rebase_ets.py"],
    "search/tree/lookahead": ["tests/search/tree/test_lookahead.py", "tests/parity/test_tree_searches.py"],
    "search/tree/mcts": ["tests/search/tree/test_mcts.py", "tests/search/tree/test_mcts_parts.py", "tests/parity/test_tree_searches.py"],
    # Its tests without the three `tts eval` runs (10 s of every surviving mutant's 27 s: 224 of 509
    # run in 19 minutes); the strategies end to end on the step model stay.
    "search/tree/particle_filtering": [f"tests/search/tree/test_particle_filtering.py::test_{name}" for name in (
        "with_uninformative_scores_resampling_is_uniform_and_random",
        "equal_scores_give_equal_weights_and_a_sharp_temperature_puts_the_weight_on_the_best",
        "the_weightings_order_from_greedy_to_flat_and_a_bad_one_is_refused", "every_step_is_resampled_the_last_one_included",
        "a_node_is_kept_exactly_when_a_resampling_draws_it",
        "with_a_sharp_verifier_the_particles_concentrate_on_the_best_branch",
        "with_a_random_verifier_particle_filtering_does_no_better_than_chance",
        "copies_of_a_particle_are_one_request_and_each_step_is_one_call_for_all_roots",
        "the_reference_particle_survives_every_resampling_in_particle_gibbs", "bad_arguments_are_refused",
        "a_space_that_never_ends_is_refused_after_max_steps",
        "particle_gibbs_runs_two_iterations_by_default_and_two_particles_are_enough",
        "a_bad_weighting_is_refused_before_anything_is_generated_and_the_default_generators_repeat",
        "a_root_without_children_ends_each_iteration_with_no_particles_and_says_so_each_time",
        "zero_draws_are_no_draws_whatever_the_weights", "children_an_expansion_does_not_return_are_counted_per_root",
        "particle_gibbs_n_counts_all_iterations_and_the_message_says_what_to_change",
        "particle_filtering_repairs_slips_a_single_path_keeps",
        "particle_gibbs_iterations_draw_new_samples_and_keep_the_reference",
        "runs_on_the_scripted_backend_with_the_judge_verifier",
        "a_problems_resampling_depends_on_the_run_seed_the_problem_and_not_its_place",
        "every_resampling_weighs_the_verifiers_scores_by_the_configs_settings",
        "particle_gibbs_reads_the_answer_and_its_index_off_the_last_iteration",
        "two_particle_gibbs_configs_of_one_run_never_resend_each_others_seeds")]
    + ["tests/parity/test_particle_filtering.py"],
    "search/tree/rebase": ["tests/search/tree/test_rebase.py", "tests/search/tree/test_rebase_properties.py",
                           "tests/parity/test_rebase_ets.py",
                           "tests/parity/test_tree_searches.py::test_each_strategy_passes_its_settings_to_its_search_function"],
    "search/tree/step_clusters": ["tests/search/tree/test_step_clusters.py", "tests/search/tree/test_ets.py",
                                  "tests/parity/test_rebase_ets.py"],
    "search/tree/stepwise": ["tests/search/tree/test_stepwise.py", "tests/search/tree/test_stepwise_parts.py", "tests/search/tree/test_search_steps.py",
                             "tests/search/tree/test_ets.py", "tests/parity/test_particle_filtering.py",
                             "tests/parity/test_rebase_ets.py"],
    "search/tree/tree_search": ["tests/search/tree/test_tree_search.py", "tests/search/tree/test_beam.py", "tests/search/tree/test_dvts.py",
                                "tests/search/tree/test_mcts.py", "tests/search/tree/test_rebase.py",
                                "tests/search/tree/test_tree_storage.py", "tests/search/tree/test_lazy_tree.py"],
    "search/tree/tree_strategy": ["tests/search/tree/test_tree_strategy.py", "tests/search/tree/test_beam.py", "tests/search/tree/test_stepwise.py",
                                  "tests/search/tree/test_lazy_tree.py", "tests/search/tree/test_tree_storage.py"],
    "verifiers/arithmetic": ["tests/verifiers/test_arithmetic.py", "tests/parity/test_verifiers_misc.py"],
    "verifiers/chain_check": ["tests/verifiers/test_chain_check.py"],
    "verifiers/confidence": ["tests/verifiers/test_confidence.py", "tests/verifiers/test_confidence_edges.py",
                             "tests/parity/test_verifiers_misc.py"],
    "verifiers/judge": ["tests/verifiers/test_judge.py", "tests/parity/test_judge_and_genrm.py"],
    # Fakes and tokenizers only (test_prm_parts.py; test_rm.py shares the config and the prompt
    # wrapping): test_prm.py and test_prm_remote.py build tiny random-weight models (~32 s) or start
    # real engines, and the parity test on the real Qwen tokenizer takes 12 s.
    "verifiers/prm": ["tests/verifiers/test_prm_parts.py", "tests/verifiers/test_rm.py"] + PRM_PARITY,
    "verifiers/prm_adapters": ["tests/verifiers/test_prm_parts.py", "tests/verifiers/test_rm.py"] + PRM_PARITY,
    # On a fake pooling server with the small model's tokenizer (test_prm_remote.py builds a tiny PRM first).
    "verifiers/rm": ["tests/verifiers/test_rm.py"],
    "verifiers/self_certainty": ["tests/verifiers/test_self_certainty.py", "tests/parity/test_verifiers_misc.py"],
    "budgets/allocator": ["tests/budgets/test_allocator_steps.py", "tests/budgets/test_allocator.py"],
    # test_escalation.py: auto with --escalate (a search run, a verifier-scored option keeping its pilot).
    "budgets/auto_strategy": ["tests/budgets/test_auto_strategy.py", "tests/budgets/test_auto_strategy_parts.py",
                              "tests/budgets/test_prompt_length.py", "tests/budgets/test_escalation.py"],
    # With the tests that plan through it: auto (calibrate, choose), the prompt-length feature, escalations.
    "budgets/cross_allocator": ["tests/budgets/test_cross_allocator_parts.py", "tests/budgets/test_cross_strategy.py",
                                "tests/budgets/test_pricing.py",
                                "tests/budgets/test_auto_strategy.py", "tests/budgets/test_prompt_length.py",
                                "tests/budgets/test_escalation.py", "tests/budgets/test_escalation_parts.py"],
    "budgets/difficulty": ["tests/budgets/test_difficulty.py", "tests/budgets/test_prompt_length.py",
                           "tests/budgets/test_escalation.py"],
    "budgets/ensemble": ["tests/budgets/test_ensemble.py"],
    "budgets/escalation": ["tests/budgets/test_escalation_parts.py", "tests/budgets/test_escalation.py"],
    "budgets/offline_plan": ["tests/budgets/test_offline_plan_parts.py", "tests/budgets/test_offline_plan.py"],
    "budgets/pricing": ["tests/budgets/test_pricer_units.py", "tests/budgets/test_pricing.py", "tests/serve/test_policy_rules.py"],
    "budgets/strategy_curves": ["tests/budgets/test_strategy_curves.py", "tests/budgets/test_cross_strategy.py",
                                "tests/budgets/test_escalation.py"],
    # Without the two runs of `simulate` (4 s each, the fold-honesty test covers the same rates):
    # with them the module's 463 mutants took 25 minutes.
    "budgets/rate_models/contested": [f"tests/stopping_rules/test_contested.py::test_{name}" for name in (
        "a_problems_own_grade_never_reaches_its_rates", "contested_rule_stops_a_flat_vote_that_the_beta_rule_runs_to_the_cap",
        "the_rate_rule_needs_a_model_and_rates_and_a_live_contested_run_a_fitted_model",
        "the_replay_makes_the_live_allocators_decisions_with_the_same_predictor",
        "state_features_are_the_votes_shares_margin_confidence_and_what_is_left",
        "prefix_features_count_votes_no_answers_and_distinct_answers_of_each_prefix",
        "cross_fitted_rates_are_zero_at_the_cap_and_use_the_rules_l2",
        "fit_pool_is_seeded_with_documented_defaults_and_needs_two_samples",
        "the_models_gain_is_p_up_minus_p_down_of_two_ridge_fits_per_row",
        "the_rate_is_the_gain_per_sample_left_and_zero_at_the_cap",
        "rules_decide_after_1_to_chunk_minus_1_samples_then_every_chunk_below_the_cap",
        "training_rows_are_the_vote_states_at_the_decision_points_against_the_vote_at_the_cap")],
    "budgets/rate_models/vote_value": ["tests/stopping_rules/test_gain.py"],
    "budgets/replay/cross_strategy": ["tests/budgets/replay/test_cross_strategy_parts.py",
                                      "tests/budgets/test_cross_strategy.py"],
    # test_escalation.py (MODULES before) never reached it: 159 mutants, no test.
    "budgets/replay/matched": ["tests/budgets/replay/test_matched.py"],
    # The replay against the live allocator at one or two seeds per rule and setting (every seed
    # of the three files took 50 s a run), and the tables against a live run's.
    "budgets/replay/online": [
        "tests/budgets/replay/test_online_sequence.py",
        "tests/stopping_rules/test_gain.py::test_the_replay_makes_the_allocators_decisions_under_the_gain_rule",
        "tests/budgets/test_online.py::test_the_replay_at_many_budgets_makes_the_allocators_decisions[0-horizon]",
        "tests/budgets/test_online.py::test_the_replay_at_many_budgets_makes_the_allocators_decisions[1-beta]",
        "tests/budgets/test_window_and_length_rules.py::test_a_live_run_counts_runs_of_equal_answers_as_the_replay_table_does",
        "tests/budgets/test_window_and_length_rules.py::test_problems_without_votes_have_an_empty_race_without_numpy_warnings",
        "tests/budgets/test_window_and_length_rules.py::test_the_race_keeps_its_split_where_the_weights_underflow",
        "tests/budgets/test_window_and_length_rules.py::test_the_replay_race_table_is_the_live_runs_race",
        *[f"tests/budgets/test_window_and_length_rules.py::test_the_replay_at_many_budgets_makes_the_allocators_decisions[{i % 2}-setting{i}]"
          for i in range(6)],
        "tests/budgets/test_dirichlet_rule.py::test_the_replay_vote_table_is_the_live_runs_votes",
        *[f"tests/budgets/test_dirichlet_rule.py::test_the_replay_at_many_budgets_makes_the_allocators_decisions[{i % 2}-setting{i}]"
          for i in range(4)]],
    "budgets/replay/oracle": ["tests/budgets/test_horizon_rule.py"],
    # Its own tests (hand-made pools) and the pool-rule dispatch of a plugin strategy; the whole of
    # test_simulate.py and test_estimators.py took 40 s a run.
    "budgets/replay/prefix": ["tests/budgets/replay/test_prefix.py",
                              "tests/budgets/replay/test_simulate.py::test_strategies_replay_by_their_pool_rule_not_their_name"],
    # The online replay against the live allocator (test_simulate_online.py), the rate rules' replays
    # (tests/stopping_rules: a cross-fitted rate model runs each fold apart) and Dirichlet's.
    "budgets/replay/simulate": ["tests/budgets/replay/test_simulate.py", "tests/budgets/replay/test_simulate_parts.py",
                                "tests/budgets/replay/test_simulate_online.py",
                                "tests/budgets/test_window_and_length_rules.py", "tests/budgets/test_dirichlet_rule.py",
                                "tests/stopping_rules/test_contested.py", "tests/stopping_rules/test_online_hard_end.py"],
    # Its parts called directly, and whole runs of four problems (tests/eval/test_allocated_parts.py),
    # then the quicker runs of test_allocated.py; the rest of it (runs of 20 problems over many
    # rounds, 4 to 18 s each, 91 s in all) ran 6 mutants a minute (606 in all).
    "eval/allocated": ["tests/eval/test_allocated_parts.py"] + [f"tests/eval/test_allocated.py::test_{name}" for name in (
        "bad_budgets_are_refused", "allocation_settings_are_checked_where_they_are_given",
        "a_pessimistic_prior_does_not_starve_later_problems",
        "a_resumed_run_with_a_smaller_limit_summarises_only_its_problems")],
    # Hand-made rows and points, the figure read back from matplotlib (nothing rendered), then the
    # file's fast tests (the `tts plot --by` CLI run, 12 s, left out).
    "eval/breakdown": ["tests/eval/test_breakdown_parts.py"] + [f"tests/eval/test_breakdown.py::test_{name}" for name in (
        "level_points_count_each_level_and_config_with_their_interval_and_tokens",
        "a_level_where_every_config_scores_zero_or_one_still_plots", "a_run_of_one_sample_count_is_drawn_around_its_point")],
    # The frontier's computations called directly; the sweep and `tts plot` tests (4 to 18 s each, 36 s of the
    # file's 45) made its 949 mutants stop early (46 run).
    "eval/frontier": [f"tests/eval/test_frontier.py::test_{name}" for name in (
        "per_bin_choice_beats_the_best_single_strategy_and_picks_a_easy_b_hard",
        "identical_strategies_gain_nothing_and_the_interval_covers_zero",
        "a_problem_never_influences_the_choices_of_its_own_fold", "a_folds_own_problems_never_decide_its_choice",
        "cost_axis_levels_let_every_config_within_the_budget_compete",
        "bin_edges_give_the_bins_of_a_tie_to_the_other_problems", "bad_settings_say_what_to_change",
        "difficulty_is_the_share_of_the_modal_answer_per_model", "a_sweeps_missing_or_broken_pool_says_why",
        "a_live_sweeps_difficulty_averages_its_runs_and_skips_those_without_samples",
        "a_runs_report_says_where_difficulty_came_from_and_how_it_was_fitted",
        "each_bin_gets_its_strategy_and_the_row_says_so_exactly", "a_cost_axis_row_costs_the_mean_of_its_problems_choices",
        "what_a_sweep_lacks_is_noted_per_model", "bin_edges_of_distinct_and_tied_scores",
        "scores_no_training_problem_has_fall_where_assign_bins_puts_them",
        "few_present_scores_get_a_bin_each_in_every_row_alone", "folds_are_balanced_integers_whatever_the_order_of_the_ids",
        "two_problems_are_each_scored_by_a_fit_on_the_other_alone", "more_bins_than_scores_and_the_gains_interval",
        "costs_within_a_millionth_are_one_level", "a_bin_where_the_single_choice_ties_the_best_keeps_the_single_choice",
        "held_out_scores_never_shape_the_training_bins")],
    "eval/labels": ["tests/eval/test_breakdown.py"],
    # Its parts called directly and runs of two to four problems (tests/eval/test_runner_parts.py);
    # test_runner.py's runs of 12 problems at n = 16 (5 to 14 s each, 55 s in all) reach every function.
    "eval/runner": ["tests/eval/test_runner_parts.py", "tests/eval/test_runner.py::test_a_new_strategy_with_dependent_"
                    "calls_runs_through_eval_and_resumes_without_runner_changes",
                    "tests/test_tracing.py::test_an_eval_batch_of_a_shared_draw_names_every_strategy_and_config_on_its_"
                    "solve_span"],
    "eval/store": ["tests/eval/test_store.py"] + [f"tests/backends/test_deterministic.py::test_{name}" for name in (
        "the_manifest_records_engine_dtype_batch_size_and_hardware",
        "auto_dtype_is_recorded_as_the_dtype_the_engine_will_use", "a_deterministic_run_resumes_only_with_its_batch_size",
        "a_deterministic_run_extends_its_limit_only_after_whole_batches",
        "runs_written_before_the_setting_existed_still_resume", "a_change_of_machine_is_kept_in_the_manifest")],
    # Without the `tts plot` tests (7 to 17 s each, 40 s of the file's 70): plotting reads the cells,
    # the sweep's own curve functions have tests of their own; then the pool-rule names it shares.
    "eval/sweep": [f"tests/eval/test_sweep.py::test_{name}" for name in (
        "the_qwen_math_rm_pool_gives_its_published_figures", "maj_at_80_per_model_equals_the_vote_computed_directly_from_the_file",
        "a_sweep_prices_every_cell_resumes_and_extends_without_recomputing", "seeds_report_their_spread",
        "bad_input_is_a_one_line_error_with_exit_code_2", "a_malformed_sweep_file_or_pool_is_refused_with_what_to_change",
        "a_live_sweep_on_the_scripted_backend_runs_the_grid_and_resumes",
        "pareto_front_keeps_only_points_no_cheaper_point_beats",
        "saturation_is_the_first_point_where_doubling_buys_less_than_the_gain",
        "a_live_sweep_without_a_backend_runs_on_vllm_with_the_units_model_and_seed",
        "length_budgets_replay_every_cap_from_one_generation", "length_budgets_are_refused_where_they_cannot_be_replayed",
        "two_configs_of_one_strategy_that_differ_in_a_setting_are_two_cells_and_two_lines",
        "a_yaml_grid_lays_out_solutions_by_verifications_for_generative_verification",
        "a_live_sweep_resumed_with_another_limit_is_refused_not_summarised_from_other_problems")]
    + ["tests/eval/test_sweep_cells.py", "tests/eval/test_sweep_parts.py", "tests/eval/test_rule_names.py"],
    # The server's planning called directly on a server state (its HTTP tests took seconds a run);
    # the rate limit through its own tests and three HTTP ones.
    "serve/planning": ["tests/serve/test_planning.py"],
    "serve/ratelimit": ["tests/serve/test_ratelimit.py"] + [f"tests/serve/test_budgets_and_models.py::test_{name}" for name in (
        "a_token_rate_limit_answers_429_with_retry_after_from_the_bucket",
        "a_request_of_n_choices_reserves_every_choices_worst_case",
        "the_rate_limit_is_per_server_without_a_key_and_refills_with_time")],
    # The replies built from solutions called directly (milliseconds), and finish_reason over HTTP.
    "serve/replies": ["tests/serve/test_replies.py", "tests/serve/test_finish_reasons.py"],
    "serve/routing": ["tests/serve/test_routing.py", "tests/serve/test_request_stop.py"],
    "execution/behaviour": ["tests/execution/test_programs.py", "tests/parity/test_execution_votes.py"],
    "execution/programs": ["tests/execution/test_program_parts.py", "tests/execution/test_programs.py", "tests/parity/test_execution_votes.py"],
    # Its parts exactly (a second in all), then the hostile programs that end within a second or so
    # (the fork bomb, the CPU loop and the programs run to a 3 s wall clock took most of a minute per
    # surviving mutant: 122 of 725 run in 7 minutes).
    "execution/sandbox": ["tests/execution/test_sandbox_parts.py"] + [f"tests/execution/test_sandbox.py::test_{name}" for name in (
        "a_normal_program_prints_and_exits_zero", "a_sleeping_program_is_stopped_at_the_wall_clock_limit",
        "allocating_50_gb_is_a_memory_error", "a_program_that_never_reads_stdin_still_finishes",
        "a_program_that_never_reads_a_large_stdin_is_stopped_at_the_wall_clock",
        "output_written_before_reading_a_large_stdin_does_not_deadlock", "errors_are_one_clear_line",
        "the_host_files_and_environment_are_out_of_reach_and_nothing_leaks_out",
        "killing_its_parent_harms_nobody_outside", "without_bubblewrap_it_refuses_unless_asked_by_name")] + [
        # The isolation tests under 2 s each (the hostile batches take 3 to 9 s apiece: too slow per mutant).
        f"tests/execution/test_isolation.py::test_{name}" for name in (
            "a_sandbox_that_cannot_start_is_tried_again", "a_sandbox_that_never_starts_is_sandbox_failed_not_the_programs_error",
            "bubblewraps_own_set_up_failure_is_sandbox_failed_with_its_message",
            "root_that_may_not_take_sandbox_user_ids_runs_as_nobody_with_the_limit_inside",
            "the_process_limit_counts_the_programs_own_processes_only",
            "a_program_that_prints_what_bubblewrap_would_is_still_judged_as_a_program",
            "only_the_capped_folders_are_writable", "tmp_stops_at_the_disk_cap",
            "with_every_sandbox_user_id_held_a_run_is_sandbox_failed")] + [
        f"tests/test_tracing.py::test_{name}" for name in (
            "sandbox_runs_in_worker_threads_are_children_of_the_callers_span",
            "a_sandbox_span_records_the_limit_isolation_verdict_and_time")],
    "benchmarks/humaneval_grading": ["tests/benchmarks/test_humaneval.py"],
    # Around a fake checker worker (test_bfcl.py's checks need bfcl-eval's environment).
    "benchmarks/bfcl_grading": ["tests/benchmarks/test_bfcl_grading.py", "tests/benchmarks/test_bfcl.py"],
    # Without every strategy end to end on chains (16 s) and `tts eval --set` (6 s): the generator,
    # options, prompt and parser are called directly by the rest (a second in all).
    "benchmarks/chains": [f"tests/benchmarks/test_chains.py::test_{name}" for name in (
        "the_generator_is_seeded_cycles_through_the_lengths_and_its_gold_is_the_chain_value",
        "options_choose_lengths_and_seed_and_bad_ones_say_what_to_write",
        "the_prompt_writes_one_equation_per_step_at_the_search_separator_and_the_tool_checks_every_step",
        "the_scripted_model_works_chains_out_with_slips_at_its_step_accuracy",
        "the_scripted_model_continues_a_partial_chain_one_step_at_a_time",
        "a_worked_solution_numbers_each_equation_and_carries_the_whole_value_on",
        "each_step_offers_exactly_the_operations_that_keep_the_value_whole_and_in_0_to_60",
        "chains_start_from_2_to_9", "chain_lengths_from_1_to_32_are_taken_and_others_refused_with_the_whole_message",
        "limit_and_seed_are_checked_and_the_default_seed_is_0",
        "a_chains_file_is_loaded_with_its_limit_and_field_names")] + ["tests/verifiers/test_chain_check.py"],
    # test_stages.py's planner runs (60 s of its 69) left out; its two fast graph tests run the executor.
    "graphs/executor": ["tests/graphs/test_executor.py"] + [f"tests/graphs/test_stages.py::test_{name}" for name in (
        "the_planned_split_is_a_graph_file_whose_stages_run_at_their_share",
        "a_token_budget_counts_each_stages_measured_tokens")],
    "graphs/graph": ["tests/graphs/test_graph_load.py", "tests/graphs/test_graph_parts.py", "tests/graphs/test_executor.py"],
    "graphs/notes": ["tests/graphs/test_sleep_time.py"],
    # test_stages.py's planner runs (14 s of its 16) left out; its graph runs and refusals kept. The
    # selector and aggregator roles' tests (test_selection.py) and the load-time refusals added.
    "graphs/roles": ["tests/graphs/test_roles_parts.py", "tests/graphs/test_executor.py", "tests/graphs/test_sleep_time.py",
                     "tests/graphs/test_scale.py",
                     "tests/graphs/test_selection.py", "tests/graphs/test_graph_load.py"] + [
        f"tests/graphs/test_stages.py::test_{name}" for name in (
            "the_planned_split_is_a_graph_file_whose_stages_run_at_their_share",
            "a_token_budget_counts_each_stages_measured_tokens", "bad_stages_are_refused_naming_the_stage_or_node")],
    # The search's parts on hand-set evaluations (test_search_parts.py), then test_graph_search.py but
    # the runs that reach other modules (the scripted backend, the CLI, the shared engines) and the
    # 16 searches of reinforce-vs-random (at a load of 25 the file ran 105 of 314 mutants in 13 minutes).
    "graphs/search": ["tests/graphs/test_search_parts.py"] + [f"tests/graphs/test_graph_search.py::test_{name}" for name in (
        "sampled_graphs_are_graph_files_the_loader_reads", "reinforce_finds_the_known_best_graph_within_100_evaluations",
        "greedy_is_a_baseline_under_the_same_budget", "budget_is_never_exceeded_and_repeats_cost_nothing",
        "a_small_space_is_exhausted_without_spending_more", "token_budget_stops_before_it_is_crossed",
        "cost_penalty_picks_the_best_reward_graph", "cost_penalty_changes_the_chosen_graph",
        "a_space_naming_an_unconfigured_model_is_refused", "a_token_budget_too_small_for_any_graph_stops_after_the_first",
        "the_shipped_search_space_loads_and_builds_graphs", "output_models_limit_only_the_output_node",
        "a_search_is_reproducible_from_its_seed")],
    # The evaluator's own tests, then the three of test_graph_search.py that run it (the file's 22 s,
    # mostly searches over a fake evaluator, never reach it).
    "graphs/search_eval": ["tests/graphs/test_search_eval.py"] + [f"tests/graphs/test_graph_search.py::test_{name}" for name in (
        "on_the_scripted_backend_a_strong_model_wins_and_the_penalty_drops_samples",
        "cli_writes_a_loadable_best_graph_and_a_summary",
        "graph_evaluations_share_one_engine_per_model_across_the_whole_search")],
    # The searches of test_graph_search.py but its four slowest (the two reinforce runs, the scripted
    # run and the CLI: 17 of the file's 22 s), and the one stage test that writes a graph file
    # (test_stages.py's planner runs took 60 s).
    "graphs/search_space": ["tests/graphs/test_search_space.py", "tests/graphs/test_stages.py::test_the_planned_split_is_a_graph_file_whose_stages_run_at_their_share"] + [
        f"tests/graphs/test_graph_search.py::test_{name}" for name in (
            "sampled_graphs_are_graph_files_the_loader_reads", "greedy_is_a_baseline_under_the_same_budget",
            "budget_is_never_exceeded_and_repeats_cost_nothing", "a_small_space_is_exhausted_without_spending_more",
            "token_budget_stops_before_it_is_crossed", "cost_penalty_picks_the_best_reward_graph",
            "cost_penalty_changes_the_chosen_graph", "a_space_naming_an_unconfigured_model_is_refused",
            "cli_refuses_a_missing_space_file", "a_token_budget_too_small_for_any_graph_stops_after_the_first",
            "the_shipped_search_space_loads_and_builds_graphs", "output_models_limit_only_the_output_node",
            "graph_evaluations_share_one_engine_per_model_across_the_whole_search")],
    "graphs/selection": ["tests/graphs/test_selection.py", "tests/parity/test_selection.py"],
    # The planner's parts on hand-made evaluations, then the graph-file tests (the three 80-problem
    # scripted runs, 4 to 20 s each under load, and the `tts stage-plan` CLI run left out).
    "graphs/stages": ["tests/graphs/test_stages_parts.py"] + [f"tests/graphs/test_stages.py::test_{name}" for name in (
        "the_planned_split_is_a_graph_file_whose_stages_run_at_their_share", "bad_stages_are_refused_naming_the_stage_or_node")],
    # Strategies run on the scripted backend directly, then one example through the runner and the
    # second-model tests (test_examples.py's runner and CLI runs took 49 s; test_graph_search.py's
    # searches over a fake evaluator never reach it).
    "graphs/strategy": ["tests/graphs/test_graph_strategy.py", "tests/graphs/test_search_eval.py"] + [f"tests/graphs/test_examples.py::test_{name}" for name in (
        "a_second_model_answers_every_batch_and_is_priced_as_itself",
        "a_model_entry_equal_to_the_runs_backend_is_served_by_the_runs_generator",
        "each_example_runs_through_the_runner[sample_then_fuse]")] + [
        "tests/graphs/test_graph_search.py::test_graph_evaluations_share_one_engine_per_model_across_the_whole_search"],
    "graphs/subproblems": ["tests/graphs/test_scale.py", "tests/graphs/test_subproblems_parts.py"],
}

# mutmut's statuses. A mutant that times out or crashes the tests was noticed: killed. One that no
# selected test reaches ("no tests") is a missing test like any survivor.
KILLED = {"killed", "timeout", "segfault", "caught by type check"}
SURVIVED = {"survived", "no tests", "suspicious", "skipped"}


@dataclass
class Result:
    """One module's measurement."""

    module: str
    mutants: int = 0
    killed: int = 0
    survived: list[str] = field(default_factory=list)
    equivalent: list[str] = field(default_factory=list)
    not_run: int = 0
    seconds: float = 0.0
    error: str | None = None
    renumbered: list[str] = field(default_factory=list)
    """Survivors counted equivalent by an entry listed under another number of the same function
    (see :func:`_listed_under_another_number`): rename those entries to the new numbers."""
    timed_out: list[str] = field(default_factory=list)
    """Mutants counted killed because their tests ran past mutmut's limit. Usually a mutant that
    loops; but a test that rebuilds something slow per run (a module-scoped fixture is rebuilt for
    every mutant) times out on any mutant and would hide a survivor, so they are named."""

    @property
    def survival(self) -> float:
        """Unexplained survivors as a share of the mutants that ran."""
        ran = self.killed + len(self.survived) + len(self.equivalent)
        return len(self.survived) / ran if ran else 0.0


def equivalents() -> dict[str, list[dict[str, str]]]:
    """Mutant name -> its entries ({"change", "reason"}) in mutation_equivalent.toml. A name may
    have two: mutmut renumbers a function's mutants when it is edited, so a name listed on one
    branch can describe another change than the same name listed on another."""
    if not EQUIVALENT.exists():
        return {}
    out: dict[str, list[dict[str, str]]] = {}
    for e in tomllib.loads(EQUIVALENT.read_text()).get("equivalent", []):
        out.setdefault(e["mutant"], []).append(e)
    return out


def _workdir(module: str, tests: list[str], mutate: list[str] | None = None) -> Path:
    """A scratch copy of the package and tests, with mutmut told to mutate only ``module`` (or the
    modules ``mutate`` lists: a change's, see ``--diff``)."""
    work = WORK / module.replace("/", ".")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    skip = shutil.ignore_patterns("__pycache__", ".hypothesis", "*.pyc")
    shutil.copytree(ROOT / "tts", work / "tts", ignore=skip)
    shutil.copytree(ROOT / "tests", work / "tests", ignore=skip)
    # tests/conftest.py finds the shared data beside the checkout; mutmut runs the tests from
    # mutants/ inside the scratch copy, so the data is linked beside that.
    # Likewise the example graphs some tests load from the checkout's examples/, and the scripts
    # under benchmarks/ some tests load by path (allocator_savings.py's rule settings).
    (work / "mutants").mkdir()
    if (ROOT.parent / "shared").is_dir():
        (work / "mutants" / "shared").symlink_to(ROOT.parent / "shared")
    (work / "mutants" / "examples").symlink_to(ROOT / "examples")
    (work / "mutants" / "benchmarks").symlink_to(ROOT / "benchmarks")
    # Some tests hold the docs to the code (a config in docs/serving.md that must build).
    (work / "mutants" / "docs").symlink_to(ROOT / "docs")
    (work / "mutants" / "README.md").symlink_to(ROOT / "README.md")
    config = {
        "source_paths": ["tts"],
        "only_mutate": [f"tts/{m}.py" for m in mutate or [module]],
        "pytest_add_cli_args_test_selection": tests,
        # Never the real engine (the `slow` tests start vLLM), nor what `make test` leaves out, nor
        # the tests that read tts's source (`reads_source`: the copy's functions are mutmut's rewrites).
        # A wall-clock limit per test (pytest-timeout): mutmut's own limit counts CPU time, so a mutant
        # whose test waits forever (a grading loop that never hears back) would otherwise never end.
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-m", "not slow and not gpu and not model_1p5b and not heavy and not reads_source",
                                "--hypothesis-profile=mutation", "--timeout=120"],
        # A mutant that makes a test hang is stopped after 3x the tests' clean time (plus 1 s), not
        # mutmut's 15x: on 2 shared cores the hangs otherwise take most of a module's time.
        "timeout_multiplier": 3.0,
    }
    lines = ["", "[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in config.items()]
    (work / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text() + "\n".join(lines) + "\n")
    return work


def _mutmut(work: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """Run mutmut in ``work``; its output is read from files, and every process it leaves behind is
    killed when it returns.

    A mutant that breaks a worker's shutdown (the grader's, say) can leave a forked test process
    running after mutmut has timed it out; one holding an output pipe kept this script waiting
    until the module's timeout (an hour) although mutmut had finished. mutmut therefore runs in a
    process group of its own, writes to files, and the group is killed when it ends."""
    # TTS_MUTATION: tests/conftest.py empties tts's memo caches before every test (see there).
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1", "TTS_MUTATION": "1"}
    cmd = ["nice", "-n", "15", sys.executable, "-m", "mutmut", *args]
    out_path, err_path = work / f".mutmut-{args[0]}.out", work / f".mutmut-{args[0]}.err"
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=err, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # mutmut itself, if timed out, and what it left
            except ProcessLookupError:
                pass
            proc.wait()
    return subprocess.CompletedProcess(cmd, code, out_path.read_text(), err_path.read_text())


def _diffs(work: Path, files: list[str]) -> dict[str, str]:
    """Every mutant's diff, read from mutmut's mutated copies of ``files`` (benchmarks/mutation_diff.py)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from mutation_diff import all_mutant_diffs

    return all_mutant_diffs(work, list(files))


def _diff(work: Path, mutant: str) -> str:
    """The mutant's diff (``mutmut show``), without its header."""
    out = _mutmut(work, "show", mutant).stdout
    return "\n".join(line for line in out.splitlines() if not line.startswith("# "))


def _changed_lines(diff: str) -> list[str]:
    """The mutant's new lines, which an equivalent's ``change`` names; a mutant that only deletes
    lines (a keyword argument on a line of its own) has none, so its deleted lines stand in."""
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return added or [line[1:].strip() for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]


def _function_of(mutant: str) -> str:
    return mutant.rpartition("__mutmut_")[0]


def _listed_under_another_number(name: str, diffs: dict[str, str],
                                 known: dict[str, list[dict[str, str]]]) -> bool:
    """Whether an equivalent listed for ``name``'s function under another number describes it.

    An edit to a function renumbers its mutants, so every listed name after the edit points at
    another mutant and its survivors come back unexplained. A listed ``change`` still finds its
    mutant when the function has exactly as many mutants making that change as entries naming it:
    the k-th such entry (by listed number) is the k-th such mutant (mutmut numbers a function's
    mutants in source order, which an edit elsewhere in the function keeps), so with equal counts
    every such mutant has its entry. With more or fewer (a new line making the same change, an old
    one gone), nothing is matched and the survivor is shown.
    """
    function = _function_of(name)
    entries = [(m, e["change"].strip()) for m, listed in known.items() if _function_of(m) == function
               for e in listed]
    mine = _changed_lines(diffs.get(name, ""))
    for change in {c for _, c in entries if c in mine}:
        listed = sum(c == change for _, c in entries)
        making = sum(change in _changed_lines(d) for m, d in diffs.items() if _function_of(m) == function)
        if listed == making:
            return True
    return False


def measure(module: str, tests: list[str], timeout: float, known: dict[str, list[dict[str, str]]]) -> Result:
    """Run mutmut on one module and classify its mutants."""
    return run_mutants(_workdir(module, tests), Result(module), timeout, known, files=[f"tts/{module}.py"])


def run_mutants(work: Path, result: Result, timeout: float, known: dict[str, list[dict[str, str]]],
                only: dict[str, str] | None = None, files: list[str] = ()) -> Result:
    """Run mutmut in a scratch copy made by :func:`_workdir` and classify the mutants: all of them
    (of ``files``), or the ones ``only`` names (name -> its diff)."""
    start = time.monotonic()
    try:
        run = _mutmut(work, "run", "--max-children", "1", *(only or ()), timeout=timeout)
        (work / "mutmut-run.log").write_text(run.stdout + run.stderr)
        if run.returncode != 0:
            result.error = f"mutmut run exited {run.returncode}; see {work / 'mutmut-run.log'}"
    except subprocess.TimeoutExpired:
        result.error = f"stopped after {timeout:.0f}s; the counts cover the mutants run by then"
    result.seconds = time.monotonic() - start
    diffs = only if only is not None else _diffs(work, files)
    listing = _mutmut(work, "results", "--all", "true").stdout
    for name, status in re.findall(r"^\s+(\S+): (.+)$", listing, re.MULTILINE):
        if only is not None and name not in only:
            continue
        result.mutants += 1
        if status in KILLED:
            result.killed += 1
            if status == "timeout":
                result.timed_out.append(name)
        elif status in SURVIVED:
            entries = known.get(name, [])
            # An entry counts only while the mutant is still the one it describes (mutmut numbers
            # mutants per function, so an edit to the function can renumber them).
            # mutmut's own `show` where the copies gave no diff for it (it once printed empty ones).
            diff = diffs.get(name) or _diff(work, name)
            if any(e["change"].strip() in _changed_lines(diff) for e in entries):
                result.equivalent.append(name)
            elif only is None and _listed_under_another_number(name, {**diffs, name: diff}, known):
                result.equivalent.append(name)
                result.renumbered.append(name)
            else:
                result.survived.append(name)
        else:  # not checked: the run stopped first
            result.not_run += 1
    return result


def table(results: list[Result]) -> str:
    """The per-module table, as Markdown."""
    rows = ["| module | mutants | killed | survived | equivalent | not run | survival % | minutes |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        rows.append(f"| {r.module} | {r.mutants} | {r.killed} | {len(r.survived)} | {len(r.equivalent)} | "
                    f"{r.not_run} | {100 * r.survival:.1f} | {r.seconds / 60:.1f} |")
    return "\n".join(rows)


def _load() -> dict[str, Result]:
    path = WORK / "results.json"
    if not path.exists():
        return {}
    return {k: Result(**v) for k, v in json.loads(path.read_text()).items()}


def stale_rows(modules: list[str], root: Path = ROOT, doc: Path = TABLE_DOC) -> dict[str, str]:
    """Module -> the newest commit (``hash date subject``) that changed ``tts/<module>.py`` after the
    commit that last wrote the module's row in ``doc`` (its first ``| module |`` line, by git blame:
    the doc's passes run newest first, so an older pass's row further down says nothing of today).
    A module without a row counts as stale too ("no row"); uncommitted edits are not seen."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout

    blame = git("blame", "--porcelain", "--", str(doc)).splitlines()
    # Porcelain: each line of the file is a header "<commit> <orig line> <final line>[ <count>]",
    # optional metadata lines, then the line itself after a tab.
    row_commit: dict[str, str] = {}
    commit = ""
    for line in blame:
        header = re.match(r"([0-9a-f]{40}) \d+ \d+", line)
        if header:
            commit = header.group(1)
        elif line.startswith("\t"):
            cell = re.match(r"\| ([\w/]+) \|", line[1:])
            if cell:
                row_commit.setdefault(cell.group(1), commit)
    stale = {}
    for module in modules:
        if module not in row_commit:
            stale[module] = "no row"
            continue
        later = git("log", "-1", "--format=%h %ad %s", "--date=short", f"{row_commit[module]}..HEAD", "--",
                    f"tts/{module}.py").strip()
        if later:
            stale[module] = later
    return stale


def review(base: str | None, timeout: float, shown: int, whole: bool = False) -> int:
    """``--diff``: mutate only what the change since ``base`` touched and run the tests that cover it.

    The mutants are those of the functions the change touched whose mutation falls on a changed
    line (``whole``: every mutant of those functions). Prints what was mutated (and what mutmut
    cannot mutate: lines outside functions, decorated functions), one table row for the change,
    and every unexplained survivor's diff. Returns 1 when a survivor is left (a missing test, or
    an equivalent mutant to list in mutation_equivalent.toml), else 0."""
    sys.path.insert(0, str(Path(__file__).parent))
    from mutation_diff import changed_lines, default_base, git_diff, select_mutants, tests_importing, touched

    base = base or default_base(ROOT)
    diff = git_diff(base, ROOT)
    files = touched(diff, ROOT)
    mutate, tests, kept = [], [], []
    for entry in files:
        module = entry.path.removeprefix("tts/").removesuffix(".py")
        if entry.outside:
            print(f"{entry.path}: lines {', '.join(map(str, entry.outside))} are outside any function "
                  "(not mutated)", file=sys.stderr)
        for f in entry.functions:
            if f.decorated:
                print(f"{f.label}: decorated, which mutmut does not mutate", file=sys.stderr)
        chosen = [f for f in entry.functions if not f.decorated]
        if not chosen:
            continue
        covering = [t for t in MODULES.get(module) or tests_importing(entry.path.removesuffix(".py").replace("/", "."),
                                                                       ROOT) if (ROOT / t.split("::")[0]).exists()]
        if not covering:
            print(f"{entry.path}: no test imports it, so its mutants cannot be killed; add it to MODULES with "
                  "its tests", file=sys.stderr)
            continue
        print(f"{entry.path}: {', '.join(f.label for f in chosen)}\n  tests: {' '.join(covering)}", file=sys.stderr)
        mutate.append(module)
        tests += [t for t in covering if t not in tests]
        kept.append(entry)
    if not kept:
        print(f"nothing to mutate: the change since {base} touches no function under tts/ that mutmut mutates")
        return 0
    start = time.monotonic()
    work = _workdir("diff", tests, mutate)
    # mutmut writes every mutant of the files first; a name that matches none stops it right after.
    _mutmut(work, "run", "--max-children", "1", "no-such-mutant", timeout=timeout)
    only = select_mutants(kept, changed_lines(diff), work, whole)
    if not only:
        print("nothing to mutate: mutmut makes no mutant on the changed lines (try --whole for every mutant "
              "of the changed functions)")
        return 0
    result = run_mutants(work, Result("diff"), timeout, equivalents(), only)
    result.seconds = time.monotonic() - start
    print(table([result]) + (f"\n({result.error})" if result.error else ""))
    for name in result.survived[:shown]:
        print(f"\n# {name} survived\n{only[name] or _diff(work, name)}")
    for name in result.survived[shown:]:
        print(f"# {name} survived")
    _say_timeouts(result, sys.stdout)
    return 1 if result.survived or result.error else 0


def _say_timeouts(result: Result, out: TextIO) -> None:
    """Name the mutants counted killed by a timeout (see :attr:`Result.timed_out`) and the survivors
    matched to equivalents listed under other numbers (:attr:`Result.renumbered`)."""
    if result.renumbered:
        print(f"# {len(result.renumbered)} matched listed equivalents under other numbers of the same function "
              f"(rename those entries): {' '.join(result.renumbered)}", file=out)
    if result.timed_out:
        names = " ".join(result.timed_out[:20]) + (" ..." if len(result.timed_out) > 20 else "")
        print(f"# {len(result.timed_out)} counted killed by a timeout (check that the tests are not just slow): {names}",
              file=out)


def _need_mutmut() -> None:
    """Exit with what to install unless this Python has a mutmut that runs under its pytest: 3.8.0's
    pytest harness fails under pytest 9.2 ('Function' object has no attribute '_nodeid') and then
    reports every mutant as not killed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("mutmut")
    except PackageNotFoundError:
        sys.exit("needs mutmut in this Python: pip install 'mutmut>=3.8.1'")
    if tuple(int(p) for p in re.findall(r"\d+", found)[:3]) < (3, 8, 1):
        sys.exit(f"mutmut {found} fails under this pytest; pip install 'mutmut>=3.8.1'")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="modules to measure (default: all of MODULES)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per module before it is stopped")
    parser.add_argument("--list", action="store_true", help="list the modules and their tests")
    parser.add_argument("--table", action="store_true", help="print the last results without running")
    parser.add_argument("--diffs", type=int, default=20, help="print the diffs of this many unexplained survivors "
                        "per module (the rest by name; `mutmut show NAME` in .mutation/MODULE/ shows one)")
    parser.add_argument("--diff", nargs="?", const="", metavar="BASE",
                        help="mutate only the functions changed since BASE (its merge base with HEAD; default "
                             "origin/main, else main), working-tree edits included, and run their tests")
    parser.add_argument("--stale", action="store_true", help="list the modules whose docs/mutation.md row is "
                        "older than a commit that changed their source (to re-run them)")
    parser.add_argument("--whole", action="store_true", help="with --diff: every mutant of the changed functions, "
                        "not only those on changed lines")
    args = parser.parse_args()
    if args.diff is not None:
        if args.modules:
            parser.error("--diff chooses the modules itself; give no module names with it")
        _need_mutmut()
        sys.exit(review(args.diff or None, min(args.timeout, 1800), args.diffs, args.whole))
    if args.stale:
        stale = stale_rows(args.modules or list(MODULES))
        for module, change in stale.items():
            print(f"{module}\t{change}")
        print(f"{len(stale)} of {len(args.modules or MODULES)} rows are older than their module's code",
              file=sys.stderr)
        return
    if args.list:
        for module, tests in MODULES.items():
            print(f"{module}: {' '.join(tests)}")
        return
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; choose from: {', '.join(MODULES)}")
    saved = _load()
    if not args.table:
        if shutil.which("nice") is None:
            sys.exit("needs `nice` (coreutils)")
        _need_mutmut()
        known = equivalents()
        for module in args.modules or list(MODULES):
            print(f"{module}: running...", file=sys.stderr, flush=True)
            result = measure(module, MODULES[module], args.timeout, known)
            # Read again just before writing: another run of this script (another module) may have
            # saved its result since this one started, and it must not be lost.
            saved = _load()
            saved[module] = result
            WORK.mkdir(exist_ok=True)
            (WORK / "results.json").write_text(json.dumps({k: asdict(v) for k, v in saved.items()}, indent=1))
            print(table([result]).splitlines()[-1] + (f"  ({result.error})" if result.error else ""),
                  file=sys.stderr, flush=True)
            diffs = _diffs(WORK / module.replace("/", "."), [f"tts/{module}.py"])
            for name in result.survived[:args.diffs]:
                print(f"\n# {name} survived\n{diffs.get(name) or _diff(WORK / module.replace('/', '.'), name)}",
                      file=sys.stderr)
            for name in result.survived[args.diffs:]:
                print(f"# {name} survived", file=sys.stderr)
            _say_timeouts(result, sys.stderr)
    chosen = [saved[m] for m in (args.modules or MODULES) if m in saved]
    print(table(chosen))


if __name__ == "__main__":
    main()
