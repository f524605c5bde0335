"""andrea fit's progress bar does not depend on whether ``rich`` happens to be installed."""

from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar

from andrea_lab.fit.cli import _plain_progress_bar


def test_the_default_bar_is_tqdm_even_with_rich_installed():
    (bar,) = _plain_progress_bar({"enable_progress_bar": None, "callbacks": None}, [])
    assert isinstance(bar, TQDMProgressBar) and not isinstance(bar, RichProgressBar)


def test_a_chosen_bar_or_no_bar_is_kept():
    assert _plain_progress_bar({"enable_progress_bar": False}, []) == []
    assert _plain_progress_bar({"callbacks": [RichProgressBar()]}, []) == []
    assert _plain_progress_bar({}, [TQDMProgressBar(refresh_rate=20)]) == []
