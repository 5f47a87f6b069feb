//! Path + query → a typed API request, parsed once.
