import sys
import mindspore
from mindspore import nn
from mindspore.nn import Cell
from mindspore.ops import functional as F
#
#
sys.path.insert(0, '/work/msenv/lib/python3.11/site-packages/mindspore/ops/function')
from mindspore.ops.auto_generate import relu_op, inplace_relu_op
from mindspore.ops.function.nn_func import inplace_relu_op as inplace_relu_op_1
from mindspore.ops.function.nn_func import relu_op as relu_op_1
from mindspore.train.amp import amp_cast

def relu_opt(input, inplace=False):
    if inplace:
        inplace_relu_op_var = inplace_relu_op_1(input)
        return inplace_relu_op_var
    input = amp_cast(input, mindspore.float16)
    relu_op_var = relu_op_1(input)
    relu_op_var = amp_cast(relu_op_var, mindspore.float32)
    return relu_op_var
#
sys.path.insert(0, '/work/wt/ms-graph/tests/mindspore_collector')

def back(y, x):
    astype_var = y.astype(x.dtype)
    return astype_var
#
sys.path.insert(0, '/work/msenv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore.nn.cell import Cell
from mindspore.nn.layer.conv import _Conv

class _ConvOpt(_Conv, Cell):

    def __init__(self):
        Cell.__init__(self)
        for key, value in _Conv.__dict__.items():
            if not key.startswith('__'):
                setattr(_ConvOpt, key, value)
#
sys.path.insert(0, '/work/msenv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore.nn.layer.normalization import _BatchNorm

class _BatchNormOpt(_BatchNorm, Cell):

    def __init__(self):
        Cell.__init__(self)
        for key, value in _BatchNorm.__dict__.items():
            if not key.startswith('__'):
                setattr(_BatchNormOpt, key, value)
#
sys.path.insert(0, '/work/msenv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore import ops
from mindspore.nn.layer.basic import Dense

class DenseOpt(Dense, Cell):

    def __init__(self, obj):
        Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x_var = amp_cast(x, mindspore.float16)
        x_shape = self.shape_op(x_var)
        x_shape = amp_cast(x_shape, mindspore.float32)
        len_var_1 = len(x_shape)
        compare_var_1 = len_var_1 != 2
        if compare_var_1:
            subscript_var = x_shape[-1]
            usub_var = -1
            tuple_var = (usub_var, subscript_var)
            x_var_4 = amp_cast(x, mindspore.float16)
            tuple_var = amp_cast(tuple_var, mindspore.float16)
            x = self.reshape(x_var_4, tuple_var)
            x = amp_cast(x, mindspore.float32)
        x_var_1 = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        x = self.matmul(x_var_1, weight_var)
        x = amp_cast(x, mindspore.float32)
        if self.has_bias:
            x_var_3 = amp_cast(x, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            x = self.bias_add(x_var_3, bias_var)
            x = amp_cast(x, mindspore.float32)
        if self.activation_flag:
            x = self.activation(x)
        len_var = len(x_shape)
        compare_var = len_var != 2
        if compare_var:
            subscript_var_2 = ops.shape(x)[-1]
            tuple_var_1 = (subscript_var_2,)
            subscript_var_1 = x_shape[:-1]
            out_shape = subscript_var_1 + tuple_var_1
            x_var_2 = amp_cast(x, mindspore.float16)
            out_shape = amp_cast(out_shape, mindspore.float16)
            x = self.reshape(x_var_2, out_shape)
            x = amp_cast(x, mindspore.float32)
        return x

    def extend_repr(self):
        s = f'input_channels={self.in_channels}, output_channels={self.out_channels}'
        if self.has_bias:
            s += f', has_bias={self.has_bias}'
        if self.activation_flag:
            s += f', activation={self.activation}'
        return s
#
sys.path.insert(0, '/work/msenv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore.nn.layer.activation import ReLU

class ReLUOpt(ReLU, Cell):

    def __init__(self, obj):
        Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, input):
        input = amp_cast(input, mindspore.float16)
        relu_var = self.relu(input)
        relu_var = amp_cast(relu_var, mindspore.float32)
        return relu_var
#
sys.path.insert(0, '/work/msenv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore.nn.layer.conv import Conv2d

class Conv2dOpt_1(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/wt/ms-graph/tests/mindspore_collector')
from amp_zoo import Block

class BlockOpt(Block, nn.Cell):

    def __init__(self, obj):
        nn.Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)
        self.conv = Conv2dOpt_1(self.conv)
        self.bn = BatchNorm2dOpt(self.bn)
        self.relu = ReLUOpt(self.relu)

    def construct(self, x):
        conv_var = self.conv(x)
        y = back(conv_var, x)
        bn_var = self.bn(y)
        back_var_1 = back(bn_var, y)
        relu_var = self.relu(back_var_1)
        back_var = back(relu_var, y)
        add_var = back_var + x
        return add_var
#
sys.path.insert(0, '/work/msenv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore.ops.primitive import _primexpr
from mindspore.nn.layer.normalization import BatchNorm2d

class BatchNorm2dOpt(BatchNorm2d, _BatchNormOpt):

    def __init__(self, obj):
        _BatchNormOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)
        self._check_input_dim = obj.__class__._check_input_dim

    @staticmethod
    @_primexpr
    def _check_input_dim(shape, cls_name):
        dim = len(shape)
        _check_dim(dim, 4, cls_name)
#
sys.path.insert(0, '/work/msenv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/wt/ms-graph/tests/mindspore_collector')
from amp_zoo import Cnn

class CnnOpt(Cnn, nn.Cell):

    def __init__(self, obj):
        nn.Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)
        self.stem = Conv2dOpt(self.stem)
        self.bn = BatchNorm2dOpt(self.bn)
        self.block = BlockOpt(self.block)
        self.head = DenseOpt(self.head)

    def construct(self, x):
        stem_var = self.stem(x)
        y = back(stem_var, x)
        bn_var = self.bn(y)
        back_var = back(bn_var, y)
        y = relu_opt(back_var)
        block_var = self.block(y)
        y = back(block_var, y)
        tuple_var = (2, 3)
        mean_var = y.mean(axis=tuple_var)
        head_var = self.head(mean_var)
        return head_var
#