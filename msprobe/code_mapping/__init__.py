"""`msprobe code_mapping`: MindSpore static-graph IR -> dump data -> Python source lines (spec code_mapping.md)."""
