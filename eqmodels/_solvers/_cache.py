"""JAX's persistent compilation cache, with thresholds that cache our programs."""

import os
import pathlib

import jax


def enable_compilation_cache(
    path: str | os.PathLike | None = None,
    *,
    min_compile_time_secs: float = 0.0,
    min_entry_size_bytes: int = 0,
) -> pathlib.Path:
    """Turn on JAX's persistent compilation cache, so that a second process finds
    the compiled programs of the first (a solve, a survey chunk, an objective's
    value and gradient) on disk instead of compiling them again.

    Pitfalls:

    - **Call it before the first compilation** of the process (at the top of the
      script, before anything runs a JAX computation): programs
      compiled before it are neither read from nor written to the cache. (JAX sets
      its cache up at its first compile and ignores a folder set later; this
      function resets that state so a late call still takes effect for what
      follows.)
    - **Host callbacks defeat it**: a program containing `jax.debug.print`,
      `jax.debug.callback` or `io_callback` is not cached. eqmodels' progress display
      runs between compiled chunks, never inside them.
    - Tracing is not cached: a warm process still traces and lowers its programs;
      only XLA's compilation is skipped.
    - The key includes the jax/jaxlib version, the backend, the XLA flags and the
      shapes and static configuration: different data *shapes* are new programs.
    - The folder can be copied or moved (a CI artefact, a container with another
      `$HOME`) and still serves its programs: JAX keeps a GPU autotuning cache
      inside the cache folder by default, whose path then enters every key (on a
      CPU too); this function turns that off
      (`jax_persistent_cache_enable_xla_caches="none"`). On a GPU, a program that
      misses the cache is autotuned again.

    **Arguments:**

    - `path`: the cache folder (created); default `$EQMODELS_CACHE_DIR` or
      `~/.cache/eqmodels/jax`.
    - `min_compile_time_secs`: cache only programs that took at least this long to
      compile (JAX's default, 1 s, would skip most of ours).
    - `min_entry_size_bytes`: cache only entries at least this large.

    **Returns:** the cache folder.
    """
    if path is None:
        env = os.environ.get("EQMODELS_CACHE_DIR")
        if env is not None and env and not env.strip():
            raise ValueError(
                "$EQMODELS_CACHE_DIR is blank: set it to a folder, or unset it for "
                "~/.cache/eqmodels/jax."
            )
        path = env or (pathlib.Path.home() / ".cache" / "eqmodels" / "jax")
    if isinstance(path, str) and not path.strip():
        # Refused: "" would silently mean the working folder.
        raise ValueError(
            "`path` is empty: give a folder (or None for $EQMODELS_CACHE_DIR or "
            "~/.cache/eqmodels/jax)."
        )
    path = pathlib.Path(path).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise ValueError(f"`path` {str(path)!r} exists and is not a folder.")
    try:
        path.mkdir(parents=True, exist_ok=True)
        # Writable, found now: an unwritable folder is refused here, not by a
        # warning at every later compilation that it could not write its entry.
        probe = path / f".eqmodels-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise OSError(
            f"`path` {str(path)!r} cannot hold the compilation cache "
            f"({type(e).__name__}: {e.strerror or e}): give a writable folder."
        ) from e
    # JAX sets its cache up once, at the first compilation, and ignores a folder
    # set later; resetting its (private) state makes the new folder take effect.
    from jax._src import compilation_cache as _cc

    if getattr(_cc, "_cache_checked", False) or getattr(
        _cc, "_cache_initialized", False
    ):
        _cc.reset_cache()
    jax.config.update("jax_compilation_cache_dir", str(path))
    # The default puts `<path>/xla_gpu_per_fusion_autotune_cache_dir` in the
    # compile options, so a copied or moved folder would have no hits.
    jax.config.update("jax_persistent_cache_enable_xla_caches", "none")
    jax.config.update(
        "jax_persistent_cache_min_compile_time_secs", min_compile_time_secs
    )
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", min_entry_size_bytes)
    return path
