"""satpoint.engine"""
