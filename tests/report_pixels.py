"""A pixel check of the report's figures: is every legend entry's series visible in its panel, in its own colour?

For each labelled artist of a panel with a legend, three renders of the same canvas: the
figure as drawn, the figure without the artist, and the panel with only that artist among
the labelled ones (against the panel with none of them). The share of the artist's own
pixels (where it changes the panel strongly) that the full figure shows as the artist alone
shows them is its visible fraction; a series
hidden under another one (a dashed line on top of it, an identical series drawn after it)
scores near 0. Legend handles are separate artists, so hiding a series leaves its legend
entry in place and the comparison sees the panel only.
"""

from __future__ import annotations

import numpy as np

#: Below this share of its own pixels shown in its own colour, a series counts as hidden.
MIN_VISIBLE = 0.35


def _render(fig) -> np.ndarray:
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(np.int16).copy()


def visible_fractions(fig) -> dict[str, float]:
    """Legend label -> the share of the series' own pixels the figure shows in its colour (every panel)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    _render(fig)  # the layout as the report draws it, then frozen: hiding a series must not move the panels
    fig.set_layout_engine("none")
    full = _render(fig)
    out: dict[str, float] = {}
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        labels = {t.get_text() for t in legend.get_texts()}
        artists = [a for a in [*ax.get_lines(), *ax.collections] if a.get_label() in labels]
        for a in artists:
            a.set_visible(False)
        empty = _render(fig)
        for a in artists:
            a.set_visible(True)
            alone = _render(fig)
            a.set_visible(False)
            own = np.abs(alone - empty).max(axis=-1) > 60  # the series' core pixels, antialiased edges left out
            shown = own & (np.abs(full - alone).max(axis=-1) <= 40)  # shown there as it looks on its own
            key = f"{ax.get_title()}: {a.get_label()}"
            out[key] = float(shown.sum() / own.sum()) if own.any() else 0.0
        for a in artists:
            a.set_visible(True)
    return out


def hidden(fig) -> list[str]:
    """The legend entries whose series the figure does not show (visible fraction below MIN_VISIBLE)."""
    return [k for k, v in visible_fractions(fig).items() if v < MIN_VISIBLE]
