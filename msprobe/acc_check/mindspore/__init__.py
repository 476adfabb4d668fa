"""acc_check of MindSpore dumps: the framework's description (framework.py), its API list (apis.py), the inputs of
a replay (inputs.py), the replayer (runner.py), the float64 references (reference.py) and the metrics and verdicts
(compare.py). runner.py, inputs.py and reference.py import mindspore."""
