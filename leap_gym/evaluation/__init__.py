"""Stage: evaluation. A response is parsed (`parse`, `static_check`), compiled and run with the `kernels` handle
(`pipeline`, `languages`), judged (`correctness`, `hostile`), and answered (`feedback`, `rewards`); `evaluator` pools it."""
