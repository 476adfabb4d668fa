"""`msprobe graph`: hierarchical model graphs built from dumps, compared, and written for tb-graph-ascend."""
