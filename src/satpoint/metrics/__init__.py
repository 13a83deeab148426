"""satpoint.metrics"""
