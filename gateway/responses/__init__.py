"""The Responses API, translated to and from the gateway's chat form; stored responses."""
