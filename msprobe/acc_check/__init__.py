"""acc_check: replay the APIs of a PyTorch dump on the device under test and on a high-precision CPU benchmark.

torch is imported only inside this package."""
