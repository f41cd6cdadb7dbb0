"""Progress bars that are stored finished.

``tqdm.auto`` draws an ipywidgets bar in a notebook, and its text fallback (what a notebook viewer on
the web, nbval and a diff show) is the bar as it was *displayed*: at 0 %. This ``tqdm`` displays the
bar under a display id and, when it closes, updates that display, so a stored notebook carries the
finished bar (``100%|██████████| 3/3``). Outside a notebook it is plain ``tqdm.auto.tqdm``.

    from specdec_core.progress import tqdm
    for prompt in tqdm(prompts, desc="acceptance"):
        ...
"""

from __future__ import annotations

from tqdm.auto import tqdm as _auto_tqdm

__all__ = ["tqdm"]

try:  # the notebook flavour exists only with ipywidgets installed
    from tqdm.notebook import tqdm_notebook as _notebook_tqdm
except ImportError:  # pragma: no cover - ipywidgets is pinned in requirements.txt
    _notebook_tqdm = None

if _notebook_tqdm is not None and issubclass(_auto_tqdm, _notebook_tqdm):

    class tqdm(_auto_tqdm):  # noqa: N801 - a drop-in for tqdm.auto.tqdm
        """``tqdm.notebook.tqdm`` whose display is updated once more when it closes."""

        def __init__(self, *args, **kwargs) -> None:
            kwargs.pop("display", None)
            super().__init__(*args, display=False, **kwargs)
            self._handle = None
            if not self.disable and getattr(self, "container", None) is not None:
                from IPython.display import display

                self._handle = display(self.container, display_id=True)
                self.displayed = True

        def close(self) -> None:
            super().close()
            if self._handle is not None:
                self._handle.update(self.container)  # the text fallback now reads the final count
                self._handle = None

else:
    tqdm = _auto_tqdm
