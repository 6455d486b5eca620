"""Recurrent and attention layers and Transformer blocks, from the textbook equations.

Every layer is weight-compatible with the Keras built-in of the same name, if there
is one (the Transformer blocks match keras-hub's sublayer by sublayer), and is
registered for `.keras` serialization under the package name "rnnkit". A new
recurrent cell subclasses `RecurrentCell` and `RecurrentLayer` and registers its
layer by name (`register_recurrent`, or an entry point): docs/guides/own-cell.md.
"""

from rnnkit.layers.bahdanau_attention import BahdanauAttention
from rnnkit.layers.dot_product_attention import DotProductAttention
from rnnkit.layers.gru import GRU, GRUCell
from rnnkit.layers.hawk import HawkBlock
from rnnkit.layers.lru import LRU, LRUCell
from rnnkit.layers.lstm import LSTM, LSTMCell
from rnnkit.layers.min_rnn import MinGRU, MinGRUCell, MinLSTM, MinLSTMCell
from rnnkit.layers.multi_head_attention import MultiHeadAttention
from rnnkit.layers.positional_encoding import PositionalEncoding
from rnnkit.layers.recurrent import RecurrentCell, RecurrentLayer
from rnnkit.layers.registry import get_recurrent, get_recurrent_cell, register_recurrent
from rnnkit.layers.rg_lru import RGLRU, RGLRUCell
from rnnkit.layers.simple_rnn import SimpleRNN, SimpleRNNCell
from rnnkit.layers.transformer import TransformerDecoderBlock, TransformerEncoderBlock
