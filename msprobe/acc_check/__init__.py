"""acc_check: replay the APIs of a PyTorch or MindSpore dump on the device under test and on a high-precision CPU
benchmark.

torch and mindspore are imported only inside this package, by the backend of the dump being checked."""
