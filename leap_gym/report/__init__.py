"""Run logs and their HTML report: `RunRecorder` writes a run folder, `write_report` renders one or
more as a self-contained page (``leap-gym report RUN_DIR [OTHER_RUN_DIR] -o report.html``)."""

from leap_gym.report.html import ReportInfo, write_report
from leap_gym.report.run_log import (
                                     GroupRecord,
                                     RunData,
                                     RunRecorder,
                                     StepRecord,
                                     TrajectoryLogRecord,
                                     TurnLog,
                                     load_run,
)

__all__ = ["GroupRecord", "ReportInfo", "RunData", "RunRecorder", "StepRecord", "TrajectoryLogRecord", "TurnLog",
           "load_run", "write_report"]
