"""The hierarchy tree of one dump (spec §4): modules and APIs nested by construct.json, parameter gradients,
API collections, micro steps and stacks. Every walk over the tree is iterative (no recursion limit)."""

from __future__ import annotations

from msprobe.dump.reader import Dump
from msprobe.errors import DumpFormatError, MsprobeError
from msprobe.log import get_logger
from msprobe.names import counter

ROOT = "DefaultModel"
MODULE, API, COLLECTION = 0, 1, 9
API_PREFIXES = ("Tensor.", "Torch.", "Functional.", "NPU.", "VF.", "Distributed.", "Aten.", "Mint.",
                "MintFunctional.", "Primitive.", "Jit.", "MindSpeed.")
COLLECTION_PREFIX = "Apis_Between_Modules"
COMM_PREFIX = "Distributed."          # the communication nodes (matched across ranks: distributed.py)



class Node:
    __slots__ = ("id", "node_type", "upnode", "subnodes", "input_data", "output_data", "stack_info",
                 "micro_step_id", "link", "data", "in_dump", "rows")

    def __init__(self, name: str, node_type: int):
        self.id = name
        self.node_type = node_type
        self.upnode: str | None = None
        self.subnodes: list = []
        self.input_data: dict = {}
        self.output_data: dict = {}
        self.stack_info: list = []
        self.micro_step_id: int | None = None
        self.link: list = []
        self.data: dict = {}
        self.in_dump = False
        self.rows: dict | None = None   # parameter key -> row of the graph's compare cells (Graph.cells)


class Graph:
    def __init__(self, dump_data_dir):
        self.root = ROOT
        self.dump_data_dir = dump_data_dir
        self.nodes: dict = {ROOT: Node(ROOT, MODULE)}
        self.micro_steps = 1
        self.warnings: list = []
        self.cells: dict = {}      # compare column -> values per row, shown after a compared parameter's fields
        self.final_cells: frozenset = frozenset()  # columns of cells whose values are their final texts

    def ancestors(self) -> dict:
        """node id -> list of ids from the root down to its parent, for every node reachable from the root."""
        result = {ROOT: []}
        queue = [ROOT]
        nodes = self.nodes
        for name in queue:        # breadth first; the list grows while it is walked
            below = result[name] + [name]
            for child in nodes[name].subnodes:
                result[child] = below
                queue.append(child)
        return result

    def post_order(self) -> list:
        """Node ids children first, siblings in order, the root last."""
        out: list = []
        stack = [(ROOT, False)]
        nodes = self.nodes
        while stack:
            name, expanded = stack.pop()
            if expanded:
                out.append(name)
                continue
            stack.append((name, True))
            stack.extend((child, False) for child in reversed(nodes[name].subnodes))
        return out


def node_type_of(name: str) -> int:
    if name.startswith(API_PREFIXES):
        return API
    return MODULE


def _backward_parent(child: str, parent, construct: dict):
    """Backward fixes of spec §4.2: (a) a backward node with a null parent takes the backward twin of its forward
    twin's parent; (b) a backward module whose scope differs from its parent's scope (in-place layers break
    backward hooks and misplace it) does the same when that twin parent exists."""
    if parent is not None:
        if ".backward." not in child or not child.startswith(("Module.", "Cell.")) \
                or child.split(".")[:-4] == parent.split(".")[:-3]:
            return parent
        return _twin_parent(child, construct) or parent
    return _twin_parent(child, construct)


def _twin_parent(child: str, construct: dict):
    """The backward counterpart of the parent of child's forward twin, when it is a construct key."""
    if ".backward." in child:
        twin = child.replace(".backward.", ".forward.")
    elif child.endswith(".backward"):
        twin = child[:-len("backward")] + "forward"
    else:
        return None
    twin_parent = construct.get(twin)
    if isinstance(twin_parent, list):   # [parent, micro step] of the Megatron variant
        twin_parent = twin_parent[0] if twin_parent else None
    return _backward_module(twin_parent, construct) if isinstance(twin_parent, str) else None


def _backward_module(forward: str, known) -> str | None:
    """`<module>.backward.<k>` for `<module>.forward.<k>`, when `known` (construct.json or the graph's nodes)
    holds it."""
    if ".forward." not in forward:
        return None
    head, _, tail = forward.rpartition(".forward.")
    backward = f"{head}.backward.{tail}"
    return backward if backward in known else None


def _is_template_line(line: str) -> bool:
    r"""True when the line calls a `...Template(` of the dump tool (`ApiTemplate(`, `TensorOPTemplate(`): what
    the pattern `[A-Z]\w*Template\(` finds, in linear time (the pattern is quadratic on a long word)."""
    at = line.find("Template(")
    while at >= 0:
        start = at
        while start > 0 and (line[start - 1].isalnum() or line[start - 1] == "_"):
            start -= 1
            if "A" <= line[start] <= "Z":
                return True
        at = line.find("Template(", at + 1)
    return False


def simplify_stack(name: str, lines: list, found: dict | None = None) -> list:
    """The short stack of the 1.x graphs (spec §4.6). found: where the API line of a stack is, by id of the stack
    (entries of a stack.json group share one list of lines), kept by the caller while the stacks live."""
    if name.startswith(("Module.", "Cell.")):
        fields = name.split(".")
        if len(fields) >= 4:
            needle = fields[-4] + "("
            for line in lines:
                if needle in line:
                    return [line]
        return lines
    index = found.get(id(lines)) if found is not None else None
    if index is None:
        index = next((at + 1 for at, line in enumerate(lines) if _is_template_line(line)), -1)
        if found is not None:
            found[id(lines)] = index
    return lines if index < 0 else lines[index:index + 1]


def _stack_for(name: str, stacks: dict, nodes: dict, simplify: bool, found: dict) -> list:
    lines = stacks.get(name)
    if lines is None:
        twin = None
        if ".backward." in name:
            twin = name.rsplit(".backward.", 1)[0] + ".forward.0"
        elif name.endswith(".backward"):
            twin = name[:-len("backward")] + "forward"
        if twin is None:
            return []
        lines = stacks.get(twin)
        if lines is None:
            return [f"The forward node {twin} of this backward node could not be found."] \
                if twin not in nodes else []
    return simplify_stack(name, lines, found) if simplify else list(lines)


def build_graph(dump: Dump, params: dict, simplify_stacks: bool = True) -> Graph:
    """The tree of one dump read with construct and stack (dump.data must still hold the entries); params: the
    parameters of its entries (params.entry_params)."""
    construct = dump.construct
    where = dump.directory
    if construct is None:
        raise MsprobeError(f"{where} has no construct.json; the graph needs dump.json, stack.json and "
                           "construct.json of an L0 or mix dump.")
    if dump.stack is None:
        raise MsprobeError(f"{where} has no stack.json; the graph needs dump.json, stack.json and construct.json.")
    if not construct:
        raise MsprobeError(f"{where}/construct.json is empty (an L1 dump has no module structure); dump at level "
                           "L0 or mix to build a graph.")
    data = dump.data
    graph = Graph(data_dir_of(dump))
    nodes = graph.nodes
    root = nodes[ROOT]

    def get_or_create(name: str) -> Node:
        node = nodes.get(name)
        if node is None:
            node = nodes[name] = Node(name, node_type_of(name))
            if isinstance(data.get(name), dict):
                node.input_data, node.output_data = params.get(name) or ({}, {})
                node.in_dump = True
        return node

    for child, parent in construct.items():
        if child == ROOT:
            raise DumpFormatError(f"{where}/construct.json: {ROOT} is reserved for the graph root.")
        if parent is not None and not isinstance(parent, str):
            if isinstance(parent, list) and parent and (parent[0] is None or isinstance(parent[0], str)):
                parent = parent[0]          # [parent, micro step] of the Megatron variant
            else:
                raise DumpFormatError(f"{where}/construct.json: the parent of {child} must be a name or null.")
        if child == "megatron_micro_step_number":
            continue
        parent = _backward_parent(child, parent, construct)
        parent_node = root if parent is None else get_or_create(parent)
        node = get_or_create(child)
        if node.upnode is None and node is not parent_node:
            node.upnode = parent_node.id
            parent_node.subnodes.append(child)

    _check_cycles(graph, where)
    _adopt_orphans(graph, construct, where)
    _attach_parameter_grads(graph, data, get_or_create)
    missing = [name for name in data if name not in nodes]
    if missing:
        graph.warnings.append(f"{len(missing)} dump.json entries are not in construct.json and are not shown "
                              f"(first: {missing[0]}).")
    absent = sum(1 for node in nodes.values() if not node.in_dump and node.node_type == API)
    if absent:      # the collectors' own way (low-risk APIs, casts and views, are counted but not dumped): no warning
        get_logger().debug("%s: %d API nodes of construct.json have no dump.json entry (not dumped); they are shown "
                           "without data.", where, absent)
    stacks = dump.stack
    _recompute(graph, stacks)
    _group_apis(graph)
    _micro_steps(graph)
    found: dict = {}
    for name, node in nodes.items():
        if node.node_type != COLLECTION and name != ROOT:
            node.stack_info = _stack_for(name, stacks, nodes, simplify_stacks, found)
    return graph


def data_dir_of(dump: Dump):
    """Where the tensors of a tensor-mode dump are: <dump dir>/dump_tensor_data (spec §12, re-rooted)."""
    import os

    path = dump.tensor_dir
    return path if dump.task == "tensor" and os.path.isdir(path) else None


def _check_cycles(graph: Graph, where: str) -> None:
    reached = {ROOT}
    queue = [ROOT]
    nodes = graph.nodes
    for name in queue:
        for child in nodes[name].subnodes:
            if child in reached:
                raise DumpFormatError(f"{where}/construct.json: {child} is listed twice in the tree.")
            reached.add(child)
            queue.append(child)
    for name, node in nodes.items():
        if name in reached or node.upnode is None:
            continue
        # walk up from an unreached node with a parent: either an orphan chain or a cycle
        seen = []
        current = name
        while current is not None and current not in reached and current not in seen:
            seen.append(current)
            current = nodes[current].upnode
        if current in seen:
            cycle = seen[seen.index(current):]
            raise DumpFormatError(f"{where}/construct.json has a cycle of parents: "
                                  f"{' -> '.join(cycle[:6])}{' -> ...' if len(cycle) > 6 else ''} -> {current}.")


def _adopt_orphans(graph: Graph, construct: dict, where: str) -> None:
    """Parents named in construct.json that are not construct keys themselves have no place in the tree; they are
    shown under the root instead of being lost."""
    nodes = graph.nodes
    orphans = [name for name, node in nodes.items() if node.upnode is None and name != ROOT]
    if not orphans:
        return
    root = nodes[ROOT]
    for name in orphans:
        nodes[name].upnode = ROOT
        root.subnodes.append(name)
    graph.warnings.append(f"{where}/construct.json names {len(orphans)} parent(s) that are not nodes of their own "
                          f"(unknown parents, first: {orphans[0]}); they are shown under {ROOT}.")


def _attach_parameter_grads(graph: Graph, data: dict, get_or_create) -> None:
    nodes = graph.nodes
    backward: dict = {}
    for name in nodes:
        head, sep, tail = name.rpartition(".backward.")
        number = counter(tail) if sep else None
        if number is not None and (head not in backward or number > backward[head][0]):
            backward[head] = (number, name)
    for name in data:
        if ".parameters_grad" not in name or name in nodes:
            continue
        prefix = name.split(".parameters_grad", 1)[0]
        parent = nodes[backward[prefix][1]] if prefix in backward else nodes[ROOT]
        node = get_or_create(name)
        node.node_type = MODULE
        node.upnode = parent.id
        parent.subnodes.append(name)


def is_recompute(lines) -> bool:
    """A module call made again by activation recomputation during backward (spec §4.2 step 4): torch's checkpoint
    (`recompute_fn` in torch/utils/checkpoint.py) or a custom autograd backward (Megatron/MindSpeed checkpointing)
    that runs it."""
    autograd = custom_backward = False
    for line in lines or ():
        if "torch/utils/checkpoint.py" in line and "recompute_fn" in line:
            return True
        if "torch/autograd/function.py" in line:
            autograd = True
        elif ", in backward" in line:
            custom_backward = True
    return autograd and custom_backward


def _recompute(graph: Graph, stacks: dict) -> None:
    """Top-level recomputed module calls move under the backward counterpart of the parent of the forward call they
    repeat (the nearest earlier call of the same module that is not a recomputation)."""
    nodes = graph.nodes
    root = nodes[ROOT]
    recomputed = {name for name in root.subnodes
                  if nodes[name].node_type == MODULE and ".forward." in name and is_recompute(_first_stack(name, nodes,
                                                                                                       stacks))}
    if not recomputed:
        return
    kept = []
    for name in root.subnodes:
        target = _recompute_parent(name, nodes, recomputed) if name in recomputed else None
        if target is None:
            kept.append(name)
            continue
        nodes[name].upnode = target
        nodes[target].subnodes.append(name)
    if len(kept) < len(root.subnodes):
        graph.warnings.append(f"{len(root.subnodes) - len(kept)} recomputed module call(s) (activation "
                              "checkpointing) are shown under the backward of the layer they repeat.")
    root.subnodes = kept


def _first_stack(name: str, nodes: dict, stacks: dict):
    """The node's stack, or, when it has none (torch's checkpoint stops a recomputation once it has what backward
    needs, so the outer call never finishes and is never dumped), the stack of its first descendant that has one."""
    queue = [name]
    for current in queue:
        lines = stacks.get(current)
        if lines is not None:
            return lines
        queue.extend(nodes[current].subnodes)
        if len(queue) > 64:
            break
    return None


def _recompute_parent(name: str, nodes: dict, recomputed: set):
    head, _, index = name.rpartition(".forward.")
    number = counter(index)
    if number is None:
        return None
    for earlier in range(number - 1, -1, -1):
        original = nodes.get(f"{head}.forward.{earlier}")
        if original is None or original.id in recomputed:
            continue
        parent = original.upnode
        return _backward_module(parent, nodes) if parent and parent != ROOT else None
    return None


def _group_apis(graph: Graph) -> None:
    nodes = graph.nodes
    root = nodes[ROOT]
    children: list = []
    run: list = []
    count = 0

    def flush():
        nonlocal count
        if len(run) >= 2:
            name = f"{COLLECTION_PREFIX}.{count}"
            count += 1
            collection = nodes[name] = Node(name, COLLECTION)
            collection.upnode = ROOT
            collection.subnodes = list(run)
            for api in run:
                nodes[api].upnode = name
            children.append(name)
        else:
            children.extend(run)
        run.clear()

    for name in root.subnodes:
        if nodes[name].node_type == API:
            run.append(name)
        else:
            flush()
            children.append(name)
    flush()
    root.subnodes = children


def _micro_steps(graph: Graph) -> None:
    nodes = graph.nodes
    step = 0
    backward_seen = False
    for name in nodes[ROOT].subnodes:
        node = nodes[name]
        if node.node_type == MODULE:
            if ".forward." in name:
                if backward_seen:
                    step += 1
                    backward_seen = False
            else:
                backward_seen = True
        node.micro_step_id = step
        queue = list(node.subnodes)
        for child in queue:
            nodes[child].micro_step_id = step
            queue.extend(nodes[child].subnodes)
    graph.micro_steps = step + 1
