__version__ = "0.1.0"

# The plugin API version a vendor package declares (DeviceDescriptor.api_version). Bump the major
# number on any incompatible change of the registration calls in docs/vendors.md.
API_VERSION = 1
