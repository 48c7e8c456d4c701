"""Test configuration: float64, strict promotion, eight virtual CPU devices."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import time


# Must happen before jax initialises its backends.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from tests import unchecked as _unchecked  # noqa: E402


jax.config.update("jax_enable_x64", True)
jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_rank_promotion", "raise")
# Strict dtype promotion is not enabled: it trips inside optax's update rules and in
# ordinary user code (`jnp.pi * jnp.arange(n)`) that the examples and training-loop
# tests run on purpose; dtype preservation is tested explicitly instead (float32
# tests of every model, term and image constructor).

# Property tests are deterministic by default (the same examples on every run, no
# example database), so CI never fails by chance; `HYPOTHESIS_PROFILE=explore`
# draws fresh random examples (and more of them) to hunt for new failures, whose
# reproductions then go into the tests as `@example`s.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", max_examples=500, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

SHARED_DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
# The uvfits file shipped with the package (eqmodels/data), read by many tests.
TEST_DATA = pathlib.Path(__file__).resolve().parents[1] / "eqmodels" / "data"


@pytest.fixture(scope="session")
def shared_data():
    """`../shared/data` when it exists (skip otherwise)."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA


# ---------------------------------------------------------------------------
# Cases run without the type checker and without x64 (tests/unchecked.py): one
# interpreter per session, started before the first test (so that it runs beside
# the other tests), shared by the xdist workers through their common folder.
class _Unchecked:
    def __init__(self, folder: pathlib.Path, keys: set[str], proc=None):
        self.folder, self.keys, self.proc = folder, keys, proc
        self._results = None

    def _running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        try:
            os.kill(int((self.folder / "pid").read_text()), 0)
        except (FileNotFoundError, ValueError):
            return True  # not started yet by the other worker
        except ProcessLookupError:
            return False
        return True

    def _wait(self) -> dict:
        results = self.folder / "results.json"
        deadline = time.monotonic() + 900
        while not results.exists():
            if not self._running():
                time.sleep(0.5)  # the results file is written before it exits
                if not results.exists():
                    raise AssertionError(
                        "the interpreter running the unchecked cases exited without "
                        "results: " + (self.folder / "stderr.txt").read_text()[-3000:]
                    )
            if time.monotonic() > deadline:
                raise AssertionError("the unchecked cases took more than 900 s")
            time.sleep(0.1)
        return json.loads(results.read_text())

    def __getitem__(self, case):
        if case.key not in self.keys:
            raise AssertionError(
                f"{case!s}: not among the cases run (declare it at the module level "
                "of the test module, with `tests.unchecked`)"
            )
        if self._results is None:
            self._results = self._wait()
        if "__crash__" in self._results:
            raise AssertionError(self._results["__crash__"])
        result = self._results[case.key]
        if "error" in result:
            raise AssertionError(f"{case!s} failed:\n{result['error']}")
        return result["value"]


# The heaviest single cases of the core lane (by `--durations`, 2.2-8 s each): edge
# cases, float32 and hardening checks whose module keeps its numpy / FD / jit / vmap
# checks in the core lane. They run in the slow lane, which keeps the core lane
# under 4 minutes on 2 cores.
SLOW_CASES = {
    # The core lane's heaviest integration tests (each 3-6 s on quiet cores; the
    # lane was 4:40 in CI, 2026-11-29): their unit checks stay in the core lane.
    "tests/test_gains_extending.py::test_self_calibrate_forward_nufft_and_a_class_match_direct",
    "tests/test_terms_rows.py::test_objective_residuals",
    "tests/test_testing.py::test_check_transforms_catches_a_term_that_cannot_be_sharded",
    "tests/test_user_subclasses.py::test_a_users_image_model_evaluates_in_an_objective",
    "tests/test_sharding.py::test_from_data_of_real_closure_products_equals_the_plain_terms",
    "tests/test_sample_checkpoint.py::test_interrupted_run_resumes_bit_for_bit",
    "tests/test_gains_joint.py::test_solve_with_gains_recovers_the_gains[lbfgs]",
    "tests/test_image_models.py::test_fit_through_a_data_term[ring]",
    # Geometric models through sharded terms (each compiles sharded programs).
    "tests/test_sharding.py::test_geometric_model_keeps_its_analytic_visibilities[cphase]",
    "tests/test_sharding.py::test_geometric_model_keeps_its_analytic_visibilities[vis]",
    "tests/test_multifreq_sharding.py::test_geometric_model_keeps_its_analytic_visibilities",
    "tests/test_multifreq.py::test_geometric_model_keeps_its_analytic_visibilities_at_a_frequency",
    # Four closure scorings of a real file (about 5 s).
    "tests/test_multifreq_cli.py::test_band_scores_are_closure_score_with_the_chi2_scatter",
    # Issue 39's and this session's heaviest (measured 2026-11-29, quiet cores).
    "tests/test_sample_checkpoint.py::test_hmc_draws_and_chunks_equal_one_chunk_bit_for_bit",
    "tests/test_geometric_pol.py::test_polarized_matches_the_numpy_reference_and_clips",
    "tests/test_geometric_pol.py::test_pol_mring_matches_the_numpy_reference",
    "tests/test_geometric_pol.py::test_regularizers_see_the_rendered_planes",
    "tests/test_geometric_xsringauss.py::test_gradients_match_complex_steps_of_the_reference_and_differences",
    "tests/test_dirichlet_prior.py::test_posterior_unconstrained_density_and_laplace",
    "tests/test_prior_sampling.py::test_dirichlet_prior_draws_are_dirichlet",
    "tests/test_multifreq_sharding.py::test_gain_corrected_band_terms_stay_replicated",
    "tests/test_gains_joint.py::test_with_gains_matches_numpy_under_jit_vmap_and_finite_differences",
    "tests/test_gains_joint.py::test_pad_and_stack_over_gains_of_different_data_sets",
    "tests/test_solve.py::test_lbfgs_matrix_two_loop_equals_the_textbook_recursion[13]",
    "tests/test_pol_plumbing.py::test_objective_shares_one_batched_transform_between_i_and_stokes_terms[nufft]",
    "tests/test_sharding.py::test_objective_on_a_mesh_with_explicit_axes[nufft]",
    "tests/test_solve.py::test_least_squares_do_not_step_onto_a_nan_gradient[solver1]",
    "tests/test_leakage.py::test_objective_value_and_gradient_equal_numpy",
    "tests/test_hardening.py::test_thin_ring_stays_finite",
    "tests/test_posterior.py::test_laplace_after_solve",
    "tests/test_terms_construction.py::test_float32_closure_phases_of_a_faint_source[1e-05]",
    "tests/test_terms_construction.py::test_float32_closure_phases_of_a_faint_source[1e-07]",
    "tests/test_sharding.py::test_inside_objective_with_shared_transform[nufft-4]",
    "tests/test_user_subclasses.py::test_a_users_term_wrapper_works_like_ours[ScaledOwnForward]",
    "tests/test_hardening.py::test_ring_whose_only_bright_pixel_has_no_flux_stays_finite",
    "tests/test_terms_rows.py::test_subclasses_and_user_terms_share_the_transform[nufft]",
    "tests/test_gains.py::test_priors_match_numpy",
    "tests/test_compile.py::test_solve_inside_a_users_jit",
    "tests/test_survey.py::test_survey_on_one_device_and_uneven_split",
    "tests/test_objective.py::test_value_grad_and_report_match_numpy[separable]",
    "tests/test_solve.py::test_lbfgs_matrix_two_loop_equals_the_textbook_recursion[5]",
    "tests/test_survey.py::test_survey_equals_single_solves",
    "tests/test_objective.py::test_value_grad_and_report_match_numpy[nufft]",
    "tests/test_extending_forward.py::test_forward_model_subclass_example",
    # Issue 37's heavier cases and the core lane's slowest (each > ~1.2 s / 3.5 s).
    "tests/test_closure_traces.py::test_chi2_value_and_gradient_against_numpy_under_jit_and_fd[trace]",
    "tests/test_compile.py::test_solve_is_compiled_with_the_options_and_gives_the_same_result",
    "tests/test_forward.py::test_nufft_derivatives_of_every_mode_and_order_match_numpy[finufft]",
    "tests/test_image_models.py::test_ring_beyond_full_asymmetry_clips_value_and_derivatives[-1.2]",
    "tests/test_image_models.py::test_ring_derivative_at_full_asymmetry[-1.0]",
    "tests/test_jones.py::test_correlation_chi2_through_jones_value_and_gradient_against_numpy[False]",
    "tests/test_jones.py::test_correlation_chi2_without_jones_and_vmap_over_images",
    "tests/test_jones.py::test_dterm_and_gain_priors_against_numpy_and_with_gains",
    "tests/test_no_silent_semantics.py::test_solve_says_when_it_ends_worse_than_it_began",
    "tests/test_observe_pol.py::test_gains_leakage_and_field_rotation_equal_station_jones[raw]",
    "tests/test_pol_image_models.py::test_beta_m_of_a_centred_mring_is_its_coefficients",
    "tests/test_pol_image_models.py::test_float32",
    "tests/test_pol_image_models.py::test_gradients_match_finite_differences[gaussian]",
    "tests/test_pol_image_models.py::test_gradients_match_finite_differences[mring]",
    "tests/test_pol_image_models.py::test_gradients_match_finite_differences[pixel]",
    "tests/test_pol_image_models.py::test_gradients_match_finite_differences[pixel_linear_masked]",
    "tests/test_pol_image_models.py::test_mcv_holds_the_circular_fraction",
    "tests/test_pol_image_models.py::test_models_in_an_objective[spherical_polcv]",
    "tests/test_pol_image_models.py::test_pol_mring_takes_arrays_and_reports_its_coefficients",
    "tests/test_pol_image_models.py::test_pol_pixel_from_stokes_round_trip[True-mask1]",
    "tests/test_pol_image_models.py::test_pol_pixel_init",
    "tests/test_pol_image_models.py::test_vmap_over_parameters",
    "tests/test_pol_plumbing.py::test_polarimetric_terms_under_vmap",
    "tests/test_pol_plumbing.py::test_stokes_i_terms_use_the_i_plane_of_a_polarimetric_image",
    "tests/test_sharding.py::test_inside_objective_with_shared_transform[direct-8]",
    "tests/test_sharding.py::test_least_squares_solvers_on_a_mesh_with_explicit_axes[solver1]",
    "tests/test_solve.py::test_a_failed_zoom_search_never_accepts_a_rise[20]",
    "tests/test_solve.py::test_a_users_solver_runs_through_solve_and_survey",
    "tests/test_solve.py::test_lbfgs_matrix_two_loop_equals_the_textbook_recursion[3]",
    "tests/test_solve.py::test_results_is_an_enumeration_and_throw_raises_on_failure",
    "tests/test_survey.py::test_survey_results_and_throw",
    "tests/test_survey_checkpoints.py::test_the_fingerprint_is_written_before_the_first_chunk",
    "tests/test_terms_rows.py::test_subclasses_and_user_terms_share_the_transform[direct]",
    "tests/test_testing.py::test_check_transforms_passes_on_correct_terms",
    "tests/test_user_subclasses.py::test_a_users_term_wrapper_works_like_ours[Scaled]",
    "tests/test_image_models.py::test_ring_beyond_full_asymmetry_clips_value_and_derivatives[1.05]",
    "tests/test_image_models.py::test_ring_beyond_full_asymmetry_clips_value_and_derivatives[1.3]",
    "tests/test_image_models.py::test_ring_derivative_at_full_asymmetry[1.0]",
    "tests/test_terms_construction.py::test_float32_closure_phases_of_a_faint_source[1.0]",
    "tests/test_terms_construction.py::test_float32_closure_phase_chi2_at_small_sigma[0.01]",
    "tests/test_sharding_forward.py::test_nufft_built_inside_shard_map",
    "tests/test_sharding.py::test_inside_objective_with_shared_transform[direct-4]",
    "tests/test_sharding.py::test_least_squares_solvers_on_a_mesh_with_explicit_axes[solver0]",
    "tests/test_sharding.py::test_training_loop_recipe_of_the_docs_compiles_once",
    "tests/test_sharding.py::test_user_term_image_model_and_meshes",
    "tests/test_terms_rows.py::test_pad_and_stack_when_only_some_data_sets_share_a_transform",
    "tests/test_survey.py::test_survey_errors",
    "tests/test_survey.py::test_survey_other_solvers_equal_single_solves[lm]",
    "tests/test_selfcal.py::test_bucketed_shapes_change_nothing",
    "tests/test_selfcal.py::test_unused_phase_reference_warns_and_numpy_tolerances",
    "tests/test_solve.py::test_params_given_as_a_filter_pytree",
    "tests/test_solve.py::test_complex_and_integer_leaves_are_held_fixed_or_refused",
    "tests/test_solve.py::test_forward_mode_through_a_gauss_newton_solve",
    "tests/test_solve.py::test_a_failed_zoom_search_never_accepts_a_rise[1]",
    "tests/test_solve.py::test_lbfgs_first_step_backtracks_to_the_parameters_scale",
    "tests/test_gains_joint.py::test_solve_with_gains_recovers_the_gains[levenberg-marquardt]",
    "tests/test_regularizers.py::test_float32_tv_gradient_at_faint_pixels",
    "tests/test_cli.py::test_closure_score_takes_models_and_refuses_unscorable_images",
    "tests/test_numerics.py::test_building_an_objective_compiles_nothing",
    "tests/test_gains_extending.py::test_user_gains_survey_of_one_structure_equals_single_solves",
    "tests/test_forward.py::test_nufft_derivatives_of_every_mode_and_order_match_numpy[nufftax]",
    "tests/test_testing.py::test_check_transforms_checks_residuals_against_the_value[objective]",
    "tests/test_testing.py::test_check_transforms_skips_sharding_a_model_without_point_fields",
    "tests/test_solve.py::test_gradient_solvers_reach_the_closed_form_minimum[LBFGS(memory_size=10, linesearch='zoom',-200-1e-07]",
    "tests/test_solve.py::test_lbfgs_matrix_two_loop_equals_the_textbook_recursion[1]",
    "tests/test_objective.py::test_chi2_offset_survey_and_sum",
    "tests/test_objective.py::test_shared_transform_equals_separate_terms[separable]",
    "tests/test_objective_m87.py::test_round1_objective_equals_numpy_reference[101-direct]",
    "tests/test_objective_m87.py::test_round1_objective_equals_numpy_reference[101-nufft]",
    "tests/test_regularizers.py::test_float32_images_stay_float32",
    "tests/test_sharding.py::test_inside_objective_with_shared_transform[separable-4]",
    "tests/test_sharding.py::test_inside_objective_with_shared_transform[separable-8]",
    "tests/test_survey.py::test_resume_after_an_interruption_recomputes_nothing",
    # Issues 38-41's session (durations under the merged suite, 2.1-9.4 s each):
    "tests/test_sharding.py::test_inside_objective_with_shared_transform[nufft-8]",
    "tests/test_survey_checkpoints.py::test_stale_results_of_a_changed_callable_never_load",
    "tests/test_solve.py::test_lbfgs_matrix_two_loop_equals_the_textbook_recursion[8]",
    "tests/test_geometric.py::test_hybrid_sum_with_a_pixel_model",
    "tests/test_pol_plumbing.py::test_objective_shares_one_batched_transform_between_i_and_stokes_terms[direct]",
    "tests/test_solve.py::test_least_squares_do_not_step_onto_a_nan_gradient[solver0]",
    "tests/test_extending_contracts.py::test_a_regularizers_residuals_get_an_array_alone_and_in_an_objective",
    "tests/test_solve.py::test_a_single_nan_in_the_start_gradient_stops_at_once[lbfgs]",
    "tests/test_nufft_backends.py::test_nufftax_float32_and_sharded",
    "tests/test_solve.py::test_least_squares_solvers_take_tsv_and_flux[gn]",
    "tests/test_solve.py::test_least_squares_solvers_take_tsv_and_flux[lm]",
    "tests/test_solve.py::test_zoom_steps_within_rounding_are_not_a_failed_search",
    "tests/test_likelihood.py::test_log_likelihood_of_a_geometric_model_under_vmap",
    "tests/test_sharding.py::test_gain_corrected_term_in_an_objective_on_a_mesh_with_explicit_axes",
    "tests/test_solve.py::test_solve_under_vmap_equals_single_solves[lbfgs]",
    "tests/test_sharding_forward.py::test_term_sharded_by_rows[separable]",
    "tests/test_sharding_forward.py::test_term_sharded_by_rows[direct]",
    "tests/test_sharding_forward.py::test_sharded_forward_keeps_the_shape_of_points[direct]",
    "tests/test_solve.py::test_a_users_least_squares_solver_is_run_not_refused",
    "tests/test_gains.py::test_bins_in_seconds_agree_on_their_edges",
    "tests/test_gains.py::test_smoothness_skips_intervals_without_data",
    "tests/test_gains.py::test_objective_shares_one_transform_with_gains",
    "tests/test_testing.py::test_check_grad_fd_passes_and_fails",
    "tests/test_sharding.py::test_wrapper_term_with_gains",
    "tests/test_sharding.py::test_objective_on_a_mesh_with_explicit_axes[direct]",
    "tests/test_terms_construction.py::test_float32_terms",
    "tests/test_hardening_41.py::test_least_squares_reports_directions_the_data_do_not_constrain",
    "tests/test_selfcal.py::test_self_calibrate_refuses_intervals_of_two_bands",
    "tests/test_survey.py::test_checkpoint_fingerprint_sees_a_user_class_code",
    "tests/test_survey.py::test_survey_over_solver_settings_equals_single_solves",
    "tests/test_gains_joint.py::test_with_gains_weights_and_errors",
    "tests/test_hardening.py::test_gaussian_narrower_than_a_pixel_is_a_point_source",
    "tests/test_solve.py::test_scipy_bridge_value_is_the_objective_at_the_model",
    "tests/test_image_models.py::test_pixel_image_from_prior",
}


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by the marks
def pytest_collection_modifyitems(config, items):
    """Marks `SLOW_CASES` slow, then runs the tests that read unchecked results last
    (the order is otherwise kept): by then their interpreter, started with the
    session, is done. A listed case whose whole module was collected must exist:
    a renamed test would otherwise drop back into the core lane unseen."""
    if not any("::" in str(arg) for arg in config.args):
        ids = {item.nodeid for item in items}
        files = {nodeid.split("::")[0] for nodeid in ids}
        stale = sorted(
            c for c in SLOW_CASES if c.split("::")[0] in files and c not in ids
        )
        if stale:
            raise pytest.UsageError(
                f"SLOW_CASES names tests that do not exist: {stale}"
            )
    for item in items:
        if item.nodeid in SLOW_CASES:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: "unchecked" in getattr(item, "fixturenames", ()))


@pytest.fixture(scope="session")
def unchecked(_unchecked_process):
    """The results of the cases declared with `tests.unchecked` by the selected
    test modules (see there): `unchecked[case]`."""
    return _unchecked_process


@pytest.fixture(scope="session", autouse=True)
def _unchecked_process(request, tmp_path_factory):
    """Starts the interpreter that runs the cases of the modules whose selected
    tests read them (none: nothing starts)."""
    modules = {
        item.module.__name__
        for item in request.session.items
        if "unchecked" in getattr(item, "fixturenames", ())
        and getattr(item, "module", None) is not None
    }
    cases = [c for c in _unchecked.CASES.values() if c.module in modules]
    keys = {c.key for c in cases}
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, common to the workers
    folder = base / "unchecked"
    try:
        if not cases:
            raise FileExistsError
        folder.mkdir()
    except FileExistsError:  # none to run, or another worker runs them
        yield _Unchecked(folder, keys)
        return
    (folder / "cases.json").write_text(
        json.dumps([{"key": c.key, **dataclasses.asdict(c)} for c in cases])
    )
    with open(folder / "stderr.txt", "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.unchecked"]
            + [str(folder / "cases.json"), str(folder / "results.json")],
            cwd=pathlib.Path(__file__).resolve().parents[1],
            env=_unchecked.environment(),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    (folder / "pid").write_text(str(proc.pid))
    yield _Unchecked(folder, keys, proc)
    # The other workers may still read the results: let it finish.
    try:
        proc.wait(timeout=900)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
