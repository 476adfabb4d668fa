"""Body of the scripts written by `msprobe op_generate` (spec §8): the generated file is this source plus a
CONFIG literal and a call of main(CONFIG), so it runs with torch alone (no msprobe, no tabulate needed).

CONFIG: api_type, api_name, full_name, propagation, data_mode, seed, iter_times, standard, forward (the dumped
forward record), backward (the dumped backward record or None); real-data records carry absolute data_name.
"""

import math

import torch

RAISE = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64}
LABELS = {"binary_consistency": "Binary Equality Standard", "absolute_threshold": "Absolute Threshold Standard",
          "ulp_compare": "ULP error Standard", "thousandth_threshold": "Thousandth Standard",
          "benchmark": "Benchmark Standard"}
TENSOR_TYPES = ("torch.Tensor", "torch.nn.parameter.Parameter")


def pick_device():
    if torch.cuda.is_available():
        return "cuda:0"
    try:
        import torch_npu  # noqa: F401

        return "npu:0"
    except ImportError:
        return "cpu"   # no accelerator: the device under test is the CPU at the dumped dtypes


def torch_dtype(text):
    name = str(text).replace("torch.", "")
    return {"half": torch.float16, "float": torch.float32, "double": torch.float64}.get(name) or getattr(torch, name)


def number(value):
    if isinstance(value, str) and value.lower() in ("inf", "-inf", "nan", "+inf"):
        return float(value)
    return value


def make_tensor(item, real_data):
    dtype = torch_dtype(item["dtype"])
    shape = [int(s) for s in item.get("shape") or []]
    if real_data:
        loaded = torch.load(item["data_name"], map_location="cpu", weights_only=True)   # never unpickles code
        if not isinstance(loaded, torch.Tensor):
            loaded = torch.as_tensor(loaded)
        tensor = loaded.to(dtype)
        return tensor.reshape(shape) if list(tensor.shape) != shape and tensor.numel() == math.prod(shape) else tensor
    low, high = number(item.get("Min")), number(item.get("Max"))
    if 0 in shape or low is None or high is None:
        return torch.zeros(shape, dtype=dtype)
    if dtype == torch.bool:
        return torch.randint(int(min(low, high)), int(max(low, high)) + 1, shape) > 0
    if dtype.is_floating_point:
        finfo = torch.finfo(dtype)
        lo, hi = (max(min(float(v), finfo.max), finfo.min) for v in (low, high))
        tensor = (torch.rand(shape, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    else:
        tensor = torch.randint(int(low), int(high) + 1, shape, dtype=torch.int64).to(dtype)
    flat = tensor.view(-1)
    if flat.numel():
        flat[0], flat[-1] = low, high
    return tensor


def build(node, real_data, requires_grad=False):
    if isinstance(node, list):
        return [build(element, real_data, requires_grad) for element in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if kind is None:
        return {key: build(value, real_data, requires_grad) for key, value in node.items()}
    if kind in TENSOR_TYPES:
        tensor = make_tensor(node, real_data)
        if requires_grad and node.get("requires_grad") and tensor.is_floating_point():
            tensor.requires_grad_(True)
        return tensor
    value = node.get("value")
    if kind == "slice":
        return slice(*value)
    if kind == "ellipsis":
        return Ellipsis
    if kind == "torch.Size":
        return torch.Size(value)
    if kind == "torch.dtype":
        return torch_dtype(value)
    if kind == "torch.device":
        return torch.device(value)
    return number(value) if not isinstance(value, list) else [number(v) for v in value]


def walk(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(walk(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: walk(v, fn) for k, v in value.items()}
    return value


def tensors(value):
    found = []
    walk(value, lambda t: found.append(t) or t)
    return found


def copy_to(value, device, raise_dtype):
    def copy(tensor):
        out = tensor.detach().clone()
        if raise_dtype and tensor.dtype in RAISE:
            out = out.to(RAISE[tensor.dtype])
        out = out.to(device)
        return out.requires_grad_(True) if tensor.requires_grad else out

    return walk(value, copy)


def device_kwargs(kwargs, device):
    return {k: (torch.device(device) if isinstance(v, torch.device) else v) for k, v in kwargs.items()}


def resolve(api_type, api_name):
    if api_type == "Functional":
        return getattr(torch.nn.functional, api_name)
    if api_type == "Tensor":
        return getattr(torch.Tensor, api_name)
    for module in (torch, torch.linalg, torch.special):
        if hasattr(module, api_name):
            return getattr(module, api_name)
    raise AttributeError(f"torch has no API {api_name}")


def grid(rows, headers=("Metric", "Value")):
    """A table in tabulate's 'grid' format."""
    rows = [list(headers), *[[str(a), str(b)] for a, b in rows]]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    text = [line]
    for index, row in enumerate(rows):
        text.append("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |")
        text.append(line.replace("-", "=") if index == 0 else line)
    return "\n".join(text)


def metrics(standard, bench, device):
    """Metric rows of one output pair (device at its dtype, bench at the raised dtype)."""
    dtype = device.dtype
    if standard == "binary_consistency" or not dtype.is_floating_point:
        equal = device.cpu() == bench.to(dtype).cpu()
        return "binary_consistency", [("Error Rate", 1.0 - equal.double().mean().item() if equal.numel() else 0.0)]
    b = bench.detach().cpu().to(torch.float64).reshape(-1)
    d = device.detach().cpu().to(torch.float64).reshape(-1)
    finite = torch.isfinite(b) & torch.isfinite(d)
    b, d = b[finite], d[finite]
    abs_err = (d - b).abs()
    eps = 2.0 ** -52 if bench.dtype == torch.float64 else 2.0 ** -23
    rel_err = abs_err / (b.abs() + eps)
    if standard == "absolute_threshold":
        rtol, small, atol = {torch.float16: (1e-3, 1e-3, 1e-5), torch.bfloat16: (4e-3, 1e-3, 1e-5)}.get(
            dtype, (1e-6, 1e-6, 1e-9))
        normal = b.abs() >= small
        return standard, [("Relative Error Ratio", ratio(rel_err[normal] > rtol)),
                          ("Absolute Error Ratio", ratio(abs_err[~normal] > atol))]
    if standard == "ulp_compare":
        mantissa, min_exp = {torch.float16: (10, -14), torch.bfloat16: (7, -126)}.get(dtype, (23, -126))
        threshold = 32 if dtype == torch.float32 else 1
        exponent = torch.where(b == 0, torch.zeros_like(b), torch.floor(torch.log2(b.abs().clamp_min(1e-300))))
        ulp = abs_err * torch.exp2(mantissa - exponent.clamp_min(min_exp))
        return standard, [("Maximum ULP Error", ulp.max().item() if ulp.numel() else 0.0),
                          ("Mean ULP Error", ulp.mean().item() if ulp.numel() else 0.0),
                          ("ULP Error Proportion", ratio(ulp > threshold))]
    if standard == "thousandth_threshold":
        return standard, [("Thousandth ratio", 1.0 - ratio(rel_err > 0.001) if rel_err.numel() else 1.0)]
    small, atol = (1e-3, 1e-5) if dtype in (torch.float16, torch.bfloat16) else (1e-6, 1e-9)
    normal = b.abs() >= small
    rel_normal, err_normal = rel_err[normal], (d - b)[normal]
    balance = abs(int((d > b).sum()) - int((d < b).sum())) / d.numel() if d.numel() else 0.0
    return "benchmark", [
        ("Small Value Error Proportion", ratio(abs_err[~normal] > atol)),
        ("Maximum Relative Error", rel_normal.max().item() if rel_normal.numel() else 0.0),
        ("Mean Relative Error", rel_normal.mean().item() if rel_normal.numel() else 0.0),
        ("Root Mean Squared Error", err_normal.pow(2).mean().sqrt().item() if err_normal.numel() else 0.0),
        ("Error Balance", balance)]


# The documented reading of each metric (spec acc_check.md §8, §7): (pass at most, warning at most) or a rule.
LIMITS = {"Small Value Error Proportion": (1.0, 2.0), "Maximum Relative Error": (1.0, 10.0),
          "Mean Relative Error": (1.0, 2.0), "Root Mean Squared Error": (1.0, 2.0), "Error Balance": (1.0, 2.0)}
PASS, WARNING, ERROR = "pass", "warning", "error"
ORDER = {PASS: 0, WARNING: 1, ERROR: 2}


def verdict(name, value, dtype):
    """pass/warning/error of one metric value, '-' for a metric without a documented limit."""
    if isinstance(value, float) and math.isnan(value):
        return ERROR
    if name in LIMITS:
        good, fair = LIMITS[name]
        return PASS if value <= good else WARNING if value <= fair else ERROR
    if name in ("Error Rate", "Relative Error Ratio", "Absolute Error Ratio"):
        return PASS if value == 0 else ERROR
    if name == "Thousandth ratio":
        return PASS if value > 0.999 else ERROR
    if name == "Mean ULP Error" and dtype == torch.float32:
        return PASS if value < 64 else ERROR
    if name == "ULP Error Proportion":
        return PASS if value < (0.05 if dtype == torch.float32 else 0.001) else ERROR
    return "-"


def verdicts(standard, dtype, rows):
    """(metric, verdict) per metric row and the overall verdict of one output: the worst of the metrics; for the
    ULP standard a pass of either ULP rule passes (float32: mean ULP error < 64 or proportion < 0.05)."""
    out = [(name, verdict(name, value, dtype)) for name, value in rows]
    judged = [v for _, v in out if v != "-"]
    if standard == "ulp_compare":
        overall = PASS if PASS in judged else ERROR
    else:
        overall = max(judged, key=ORDER.get) if judged else PASS
    return out, overall


def ratio(mask):
    return mask.double().mean().item() if mask.numel() else 0.0


def compare(standard, out_device, out_bench):
    if isinstance(out_device, (list, tuple)):
        for index, (device, bench) in enumerate(zip(out_device, out_bench)):
            print(f"index {index}:")
            compare(standard, device, bench)
        return
    if not isinstance(out_device, torch.Tensor):
        if out_device == out_bench:
            print("PASS: out_device and out_bench equals.")
        else:
            print(f"ERROR: out_device ({out_device!r}) and out_bench ({out_bench!r}) differ.")
        return
    used, rows = metrics(standard, out_bench, out_device)
    print(grid([("Shape", tuple(out_device.shape)), ("Dtype of out_device", out_device.dtype),
                ("Dtype of out_bench", out_bench.dtype), ("Compare Standard", LABELS[used]), *rows]))
    judged, overall = verdicts(used, out_device.dtype, rows)
    print(grid([*judged, ("Result", overall)], ("Metric", "Result")))


def main(config):
    device = pick_device()
    real_data = config["data_mode"] == "real_data"
    backward = config["propagation"] == "backward"
    function = resolve(config["api_type"], config["api_name"])
    torch.manual_seed(config["seed"])
    print(f"{config['full_name']}: device {device}, benchmark cpu (float16/bfloat16 -> float32, "
          f"float32 -> float64), {config['data_mode']}.")
    for iteration in range(1 if real_data else config["iter_times"]):
        print(f"iter: {iteration}:")
        forward = config["forward"]
        args = build(forward.get("input_args") or [], real_data, backward)
        kwargs = build(forward.get("input_kwargs") or {}, real_data, backward)
        args_device, kwargs_device = copy_to(args, device, False), device_kwargs(copy_to(kwargs, device, False),
                                                                                   device)
        args_bench, kwargs_bench = copy_to(args, "cpu", True), device_kwargs(copy_to(kwargs, "cpu", True), "cpu")
        out_device = function(*args_device, **kwargs_device)
        out_bench = function(*args_bench, **kwargs_bench)
        if backward:
            record = config["backward"]
            grads = build(record.get("grad_input") or record.get("input") or [], real_data)
            outs_device = [t for t in tensors(out_device) if t.requires_grad][:len(grads)]
            outs_bench = [t for t in tensors(out_bench) if t.requires_grad][:len(grads)]
            inputs_device = [t for t in tensors([args_device, kwargs_device]) if t.requires_grad]
            inputs_bench = [t for t in tensors([args_bench, kwargs_bench]) if t.requires_grad]
            grads_device = [g.to(device, o.dtype).reshape(o.shape) for g, o in zip(grads, outs_device)]
            grads_bench = [g.to(o.dtype).reshape(o.shape) for g, o in zip(grads, outs_bench)]
            out_device = torch.autograd.grad(outs_device, inputs_device, grads_device, allow_unused=True)
            out_bench = torch.autograd.grad(outs_bench, inputs_bench, grads_bench, allow_unused=True)
        compare(config["standard"], out_device, out_bench)
    print("Compare finished.")
