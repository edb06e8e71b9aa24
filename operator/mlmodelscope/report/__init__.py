"""Reading result documents back: `mlms compare` (runs side by side, with the differences in
their HW/SW stack and spec) and `mlms report` (the same as one self-contained HTML page). Pure
functions return data; rendering is separate (``render.py`` for the terminal, ``html.py`` for
the page)."""
