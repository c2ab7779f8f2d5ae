"""KernelBench's answer format: a ``ModelNew`` whose kernels are built with ``load_inline``.

`answer` converts such an answer exactly to the native format (`host`, `names` and `runtime` translate its
host code); `build` really builds the extension on the ``cuda`` backend. `languages` judges it like a native one.
"""

from leap_gym.kernelbench.answer import (
                                         BUILD_TIMEOUT_S,
                                         NATIVE_IS_CHEAPER,
                                         Conversion,
                                         Extension,
                                         LoadInlineResponse,
                                         convert_answer,
                                         is_load_inline_answer,
                                         prepare_answer,
)

__all__ = ["BUILD_TIMEOUT_S", "NATIVE_IS_CHEAPER", "Conversion", "Extension", "LoadInlineResponse", "convert_answer",
           "is_load_inline_answer", "prepare_answer"]
