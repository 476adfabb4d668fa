"""acc_check of PyTorch dumps: the framework's description (framework.py), its API list (apis.py), the inputs of a
replay (inputs.py), the replayer (runner.py), the precision standards (standards.py), and op_generate's
standalone scripts (op_generate.py, op_script.py). Every module but framework.py and apis.py imports torch."""
