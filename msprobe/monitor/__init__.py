"""The training monitor: cheap per-step metrics of modules, gradients and optimizer states, anomaly alerts, the live
golden watch, `msprobe monitor analyse` and `msprobe monitor report`. Framework-free; the PyTorch and MindSpore
`TrainerMon`s are thin adapters in msprobe.pytorch and msprobe.mindspore."""
