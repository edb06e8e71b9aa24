"""Reading result documents back: `mlms compare` (runs side by side, with the differences in
their HW/SW stack and spec), and later `mlms report`. Pure functions return data; rendering
is separate (``render.py``)."""
