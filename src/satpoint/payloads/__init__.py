"""satpoint.payloads"""
