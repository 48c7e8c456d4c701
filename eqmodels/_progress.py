"""Progress between the compiled chunks of a long computation (`survey`,
`sample`): a tqdm bar when tqdm is installed, else a line per update on stderr.
Never inside a compiled program."""

import sys


def progress_bar(
    total: int, enabled: bool, *, desc: str, unit: str, units: str, initial: int = 0
):
    """A progress display (`None` when not `enabled`) with `update(k, info="")`
    (`k` more done; `info`: a short status), `write(text)` (a line of its own)
    and `close()`. `unit`: tqdm's unit (`"draw"`); `units`: the plain lines' word
    (`"draws"`)."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _TextProgress(total, desc, units, initial)
    return _TqdmProgress(tqdm(total=total, unit=unit, desc=desc, initial=initial), desc)


class _TextProgress:
    def __init__(self, total: int, desc: str, units: str, initial: int = 0):
        self.total, self.n = total, initial
        self.desc, self.units = desc, units

    def update(self, k: int, info: str = "") -> None:
        self.n += k
        tail = f" ({info})" if info else ""
        print(f"{self.desc}: {self.n}/{self.total} {self.units}{tail}", file=sys.stderr)

    def write(self, text: str) -> None:
        print(f"{self.desc}: {text}", file=sys.stderr)

    def close(self) -> None:
        pass


class _TqdmProgress:
    def __init__(self, bar, desc: str):
        self.bar, self.desc = bar, desc

    def update(self, k: int, info: str = "") -> None:
        if info:
            self.bar.set_postfix_str(info, refresh=False)
        self.bar.update(k)

    def write(self, text: str) -> None:
        self.bar.write(f"{self.desc}: {text}", file=sys.stderr)

    def close(self) -> None:
        self.bar.close()
