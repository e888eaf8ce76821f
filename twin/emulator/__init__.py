"""A local AWS emulator: moto's server plus the behaviour the workflow needs that moto lacks."""

from ..runner.moto_kms import share_one_symmetric_private_key
from ..runner.shared_loader import share_one_loader
from .moto_amis import stock_amis_only
from .moto_server import remember_action_methods

# before moto builds a backend or the twin a client (each module's docstring says why)
stock_amis_only()
share_one_loader()
share_one_symmetric_private_key()
remember_action_methods()
