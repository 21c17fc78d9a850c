"""The write path's stages."""
